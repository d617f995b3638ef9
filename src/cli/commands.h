// The `zaya` subcommands; each file registers one on the CLI11 app.
#pragma once
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace zaya::cli {

void register_info(CLI::App &app);
void register_forward(CLI::App &app);
void register_grads(CLI::App &app);
void register_train(CLI::App &app);
void register_eval(CLI::App &app);
void register_init(CLI::App &app);
void register_bench(CLI::App &app);
void register_prepare(CLI::App &app);
void register_export(CLI::App &app);
void register_generate(CLI::App &app);
void register_serve(CLI::App &app);
void register_chat(CLI::App &app);
void register_tokenize(CLI::App &app);

// The command line as given (the supervisor re-runs it).
inline std::vector<std::string> g_argv;

// Thrown by a command to make zaya exit with `code` without printing an error (the command has said why).
struct ExitStatus {
    int code;
};

} // namespace zaya::cli
