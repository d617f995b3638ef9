// zaya train --data DIR --out RUN_DIR [--model PRESET|CONFIG.json | --init MODEL_DIR] [--steps N] ... — train from
// scratch, or on from a trained model.
#include "cli/commands.h"

#include <sstream>
#include "core/error.h"
#include "train/run.h"
#include "train/supervisor.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

namespace zaya::cli {

void register_train(CLI::App &app) {
    auto *cmd = app.add_subcommand("train", "Train a ZAYA1-architecture model on prepared data (zaya prepare)");
    auto tc = std::make_shared<TrainConfig>();
    auto config_file = std::make_shared<std::string>();
    cmd->add_option("--config", *config_file, "JSON file with any of the options below (flag names, '_' for '-')");
    cmd->add_option("--data", tc->data, "Prepared data directory");
    cmd->add_option("--out", tc->out, "Run directory (metrics.jsonl, train_config.json, model/)");
    auto *model = cmd->add_option("--model", tc->model, "Preset (tiny, small, base, 1b, zaya1-8b) or config.json")
                      ->capture_default_str();
    cmd->add_option("--init", tc->init,
                    "Start from this trained model (model directory or checkpoint) instead of random weights: its "
                    "shape and weights, a new optimizer state and schedule")
        ->excludes(model);
    cmd->add_option("--rope-theta", tc->rope_theta,
                    "RoPE base of the full-attention layers (0 = the model's own); raise it with --seq to extend "
                    "the context")
        ->capture_default_str();
    cmd->add_option("--steps", tc->steps, "Optimizer steps")->capture_default_str();
    cmd->add_option("--batch", tc->batch, "Sequences per optimizer step")->capture_default_str();
    cmd->add_option("--micro-batch", tc->micro_batch, "Sequences per forward/backward (0 = batch)")->capture_default_str();
    cmd->add_option("--seq", tc->seq, "Tokens per sequence")->capture_default_str();
    cmd->add_option("--lr", tc->lr, "Peak learning rate (Muon RMS-matched to AdamW)")->capture_default_str();
    cmd->add_option("--weight-decay", tc->weight_decay, "Decoupled weight decay of matrices and embeddings")->capture_default_str();
    cmd->add_option("--grad-clip", tc->grad_clip, "Max global gradient norm (0 = off)")->capture_default_str();
    cmd->add_option("--ns-precision", tc->ns_precision, "Muon Newton-Schulz precision: bf16 (as torch) | fp32")
        ->capture_default_str();
    cmd->add_option("--precision", tc->precision,
                    "Matmul operands of forward/backward: fp32 | bf16 (fp32 accumulation, fp32 master weights)")
        ->capture_default_str();
    cmd->add_option("--device", tc->device, "Where training runs: cpu | cuda (parameters, gradients, optimizer state on the GPU)")
        ->capture_default_str();
    cmd->add_option("--schedule", tc->schedule, "cosine | wsd | constant")->capture_default_str();
    cmd->add_option("--pack", tc->packing,
                    "Rows: 'chunks' of the token stream, or whole 'documents' packed by best-fit decreasing")
        ->capture_default_str();
    cmd->add_flag("--doc-mask", tc->doc_mask,
                  "Document masking: attention, the CCA conv and the value shift stop at each EOS, positions restart");
    cmd->add_option("--context-parallel", tc->context_parallel,
                    "Context parallelism: groups of N ranks (mpirun) share each sequence, 2 chunks of --seq/(2N) "
                    "tokens per rank (long contexts in less memory per rank)")
        ->capture_default_str();
    cmd->add_option("--warmup", tc->warmup, "Warmup steps (−1: 5% of --steps, at most 100)")->capture_default_str();
    cmd->add_option("--min-lr-ratio", tc->min_lr_ratio, "Final lr as a fraction of the peak")->capture_default_str();
    cmd->add_option("--balance", tc->balance, "Balancing-bias controller on/off")->capture_default_str();
    cmd->add_option("--balance-lr", tc->balance_lr, "Learning rate of the balancing biases' AdamW")->capture_default_str();
    cmd->add_option("--eval-every", tc->eval_every, "Validate every N steps (0 = only at the end)")->capture_default_str();
    cmd->add_option("--eval-batches", tc->eval_batches, "Validation batches per evaluation (0 = whole split)")->capture_default_str();
    cmd->add_option("--sample-tokens", tc->sample_tokens, "Tokens of text sampled at the end")->capture_default_str();
    cmd->add_option("--sample-prompt", tc->sample_prompt, "Prompt of the final sample")->capture_default_str();
    cmd->add_flag("--sample-chat", tc->sample_chat,
                  "The final sample as a chat: --sample-prompt is the user's turn, the answer stops at its end "
                  "(as zaya generate --chat)");
    cmd->add_option("--seed", tc->seed, "Seed of initialisation and data order")->capture_default_str();
    cmd->add_option("--ckpt-every", tc->ckpt_every, "Checkpoint every N steps and at the end (0 = never)")
        ->capture_default_str();
    cmd->add_option("--keep", tc->keep, "Keep only the newest K checkpoints (0 = all)")->capture_default_str();
    cmd->add_flag("--resume", tc->resume, "Continue from the newest loadable checkpoint in RUN_DIR/checkpoints");
    cmd->add_option("--from", tc->resume_from, "Continue from this checkpoint directory");
    cmd->add_option("--stop-after", tc->stop_after, "Stop after N steps of this invocation, with a checkpoint")
        ->capture_default_str();
    cmd->add_option("--ckpt-async", tc->ckpt_async, "Write checkpoints in a background thread")->capture_default_str();
    cmd->add_option("--spike-z", tc->spike_z,
                    "Skip an update whose loss or grad norm is this many std devs above the recent window (0 = off)")
        ->capture_default_str();
    cmd->add_option("--spike-window", tc->spike_window, "Accepted steps the spike statistics cover")->capture_default_str();
    cmd->add_option("--spike-rollback", tc->spike_rollback,
                    "Roll back to the last checkpoint after this many skipped steps in a row (0 = never)")
        ->capture_default_str();
    cmd->add_option("--comm-timeout", tc->comm_timeout,
                    "Data parallel: abort every rank when a collective has not completed after this many seconds "
                    "(0 = wait forever)")
        ->capture_default_str();
    auto sup = std::make_shared<SupervisorConfig>();
    auto supervised = std::make_shared<bool>(false);
    cmd->add_flag("--supervise", *supervised,
                  "Run the trainer as a child process; restart it from the latest checkpoint when it dies or hangs");
    cmd->add_option("--max-restarts", sup->max_restarts, "Supervisor: restarts in a row without a new checkpoint")
        ->capture_default_str();
    cmd->add_option("--heartbeat-timeout", sup->heartbeat_timeout, "Supervisor: seconds without a step before a kill")
        ->capture_default_str();
    auto launcher = std::make_shared<std::string>();
    cmd->add_option("--launcher", *launcher,
                    "Supervisor: run every attempt under this launcher, e.g. \"mpirun -np 4 -x OMP_NUM_THREADS\" "
                    "(split at spaces); the whole job restarts");
    cmd->add_option("--restart-delay", sup->restart_delay, "Supervisor: first restart delay in seconds (doubles)")
        ->capture_default_str();
    cmd->add_flag("--save-init", tc->save_init, "Also write the initial model to RUN_DIR/init/");
    cmd->add_flag("--dump-batches", tc->dump_batches,
                  "Write every step's tokens to RUN_DIR/batches.bin (int32; their flags, with loss masks or --pack "
                  "documents, to batches_learned.bin)");
    cmd->callback([cmd, tc, config_file, sup, supervised, launcher, model] {
        if (!launcher->empty() && !*supervised) fail("train: --launcher is a supervisor option: add --supervise");
        TrainConfig c = *tc;
        bool model_in_file = false;
        if (!config_file->empty()) {
            std::ifstream in(*config_file);
            if (!in) fail("cannot open train config '{}'", *config_file);
            nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
            if (j.is_discarded()) fail("{}: not valid JSON", *config_file);
            TrainConfig from_file;
            train_config_from_json(from_file, j, *config_file);
            model_in_file = j.contains("model") && j["model"].is_string() && !j["model"].get<std::string>().empty();
            // Flags given on the command line win over the file.
            c = from_file;
            for (const CLI::Option *o : cmd->get_options()) {
                if (o->count() == 0 || o->get_name() == "--config") continue;
                nlohmann::json patch;
                std::string key = o->get_name().substr(2);
                std::replace(key.begin(), key.end(), '-', '_');
                if (key == "from") key = "resume_from";
                nlohmann::json flags = train_config_to_json(*tc);
                if (flags.contains(key)) {
                    patch[key] = flags[key];
                    train_config_from_json(c, patch, "--" + o->get_name().substr(2));
                }
            }
        }
        if (!c.init.empty()) {
            // The shape is --init's own: a --model in the config file would be a second, conflicting answer.
            if (model_in_file || model->count() > 0)
                fail("train: 'model' and 'init' both name the model; --init's config.json gives its shape");
            c.model.clear();
        }
        if (*supervised) {
            c.validate();
            SupervisorConfig sc = *sup;
            sc.run_dir = c.out;
            std::istringstream words(*launcher);
            for (std::string w; words >> w;) sc.launcher.push_back(w);
            if (sc.max_restarts < 0) fail("train: --max-restarts must be ≥ 0, got {}", sc.max_restarts);
            if (!(sc.heartbeat_timeout > 0)) fail("train: --heartbeat-timeout must be positive");
            if (!(sc.restart_delay >= 0)) fail("train: --restart-delay must be ≥ 0");
            // The child gets the same command line without the supervisor's own flags.
            std::vector<std::string> child;
            for (size_t i = 0; i < g_argv.size(); ++i) {
                const std::string &a = g_argv[i];
                bool own = a == "--supervise", with_value = false;
                for (const std::string f : {"--max-restarts", "--heartbeat-timeout", "--restart-delay", "--launcher"}) {
                    if (a == f) own = with_value = true; // "--flag VALUE"
                    if (a.rfind(f + "=", 0) == 0) own = true; // "--flag=VALUE"
                }
                if (!own) child.push_back(a);
                if (with_value) ++i;
            }
            const int rc = supervise(child, sc);
            if (rc != 0) throw ExitStatus{rc};
            return;
        }
        const int rc = run_training(c);
        if (rc != 0) throw ExitStatus{rc};
    });
}

} // namespace zaya::cli
