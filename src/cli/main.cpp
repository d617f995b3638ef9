// zaya — train and run ZAYA1-architecture mixture-of-experts language models.
#include "cli/commands.h"
#include "core/error.h"
#include "core/version.h"

#include <cstdio>
#include <exception>

int main(int argc, char **argv) {
    CLI::App app{"zaya: train and run ZAYA1-architecture mixture-of-experts language models (CPU; NVIDIA GPUs with "
                 "--device cuda)"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("zaya ") + zaya::kVersion);
    zaya::cli::register_info(app);
    zaya::cli::register_forward(app);
    zaya::cli::register_grads(app);
    zaya::cli::register_train(app);
    zaya::cli::register_eval(app);
    zaya::cli::register_init(app);
    zaya::cli::register_bench(app);
    zaya::cli::register_prepare(app);
    zaya::cli::register_export(app);
    zaya::cli::register_generate(app);
    zaya::cli::register_serve(app);
    zaya::cli::register_chat(app);
    zaya::cli::register_tokenize(app);
    zaya::cli::g_argv.assign(argv, argv + argc);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp &e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp &e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion &e) {
        return app.exit(e);
    } catch (const CLI::ParseError &e) {
        // One line, like every other error (CLI11 would add a second "Run with --help" line).
        std::fprintf(stderr, "zaya: error: %s (see zaya --help)\n", e.what());
        return e.get_exit_code() != 0 ? e.get_exit_code() : 2;
    } catch (const zaya::cli::ExitStatus &e) {
        return e.code;
    } catch (const zaya::Error &e) {
        std::fprintf(stderr, "zaya: error: %s\n", e.what());
        return 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "zaya: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
