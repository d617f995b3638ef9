#include "train/run.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/chat_template.h"
#include "data/hf_chat_template.h"
#include "data/tokenizer.h"
#include "infer/engine.h"
#include "io/model_io.h"
#include "ops/cpu/gemm.h"
#include "dist/comm.h"
#include "train/checkpoint.h"
#include "train/checkpoint_writer.h"
#include "train/memory.h"
#include "train/signals.h"
#include "train/start_model.h"
#include "train/supervisor.h"
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <omp.h>
#include <unistd.h>

namespace zaya {

namespace fs = std::filesystem;

namespace {

// Every rank's `bytes` as "a / b / c" MiB with `decimals` places: a collective, every rank calls it.
std::string per_rank_mib(Communicator &comm, size_t bytes, int decimals) {
    std::vector<int64_t> all(size_t(comm.size()), 0);
    all[size_t(comm.rank())] = int64_t(bytes);
    comm.allreduce_sum(all.data(), all.size());
    std::string list;
    for (int64_t b : all) list += fmt::format("{}{:.{}f}", list.empty() ? "" : " / ", double(b) / (1 << 20), decimals);
    return list;
}

std::string duration(double s) {
    if (s < 60) return fmt::format("{:.0f}s", s);
    if (s < 3600) return fmt::format("{}m{:02d}s", int(s / 60), int(s) % 60);
    return fmt::format("{}h{:02d}m", int(s / 3600), int(s / 60) % 60);
}

// Keeps the metrics of steps ≤ `step` (those the resumed checkpoint contains); later lines were written by a
// process that did not get to checkpoint them.
void truncate_metrics(const std::string &path, int64_t step) {
    if (!fs::exists(path)) return;
    std::ifstream in(path);
    std::string line, kept;
    while (std::getline(in, line)) {
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() > step)
            continue;
        kept += line + "\n";
    }
    write_file_atomic(path, kept);
}

std::string progress_bar(int64_t done, int64_t total, int width) {
    int filled = int(double(width) * double(done) / double(total));
    std::string bar;
    for (int i = 0; i < width; ++i) bar += i < filled ? "█" : "░";
    return bar;
}

} // namespace

namespace {

int train(const TrainConfig &tc_in, StopSignals &signals, const std::shared_ptr<Communicator> &comm) {
    TrainConfig tc = tc_in;
    const bool root = comm->is_root();
    if (!root && !std::freopen("/dev/null", "w", stdout)) fail("rank {}: cannot silence stdout", comm->rank());
    auto data = DataSet::open(tc.data);
    Model model = train_start_model(tc, data->manifest(), data->tokenizer_path());
    const ZayaConfig mc = model.config;

    std::error_code ec;
    const bool resuming = tc.resume || !tc.resume_from.empty();
    const std::string metrics_path = root ? (fs::path(tc.out) / "metrics.jsonl").string() : "/dev/null";
    if (root) {
        fs::create_directories(tc.out, ec);
        if (ec) fail("cannot create run directory '{}': {}", tc.out, ec.message());
        write_file_atomic((fs::path(tc.out) / "train_config.json").string(), train_config_to_json(tc).dump(2) + "\n");
        if (tc.save_init) model_save(model, (fs::path(tc.out) / "init").string(), DType::F32);
    }
    // --dump-batches: batches.bin, and batches_learned.bin (u8, the same shape) once the batches carry flags (loss
    // masks, packed rows' padding).
    std::ofstream batches_out, learned_out;
    auto open_dump = [&](std::ofstream &f, const char *name) {
        f.open(fs::path(tc.out) / name, std::ios::binary | std::ios::trunc);
        if (!f) fail("cannot write '{}'", (fs::path(tc.out) / name).string());
    };
    if (tc.dump_batches && root) open_dump(batches_out, "batches.bin");
    BatchLog batch_log;
    // MFU's peak: on the CPU the matmul rate measured now; on a GPU the H200's dense bf16 figure (989 TFLOP/s).
    const bool on_gpu = tc.device == "cuda";
    const double peak =
        on_gpu ? 989e12 : cpu::matmul_peak_gflops(cpu::matmul_precision_from_string(tc.precision), 2048, 3) * 1e9;
    ParamCounts pc = param_counts(mc);
    Trainer trainer(tc, std::move(model), data, comm);
    std::unique_ptr<CheckpointWriter> writer;
    if (tc.ckpt_every > 0 && tc.ckpt_async) { // every rank: each writes its own part of each checkpoint
        writer = std::make_unique<CheckpointWriter>(trainer, tc.out, tc.keep);
        trainer.set_before_update([&writer] { writer->wait_snapshot(); });
    }
    fmt::print("zaya train: {} params ({} active non-embedding), vocab {}, {} layers, {} experts\n", pc.total,
               pc.active_non_embedding, mc.vocab_size, mc.num_hidden_layers, mc.num_experts);
    if (!tc.init.empty() && !resuming)
        fmt::print("  initialised from {} (its weights and balancing biases; new optimizer state)\n", tc.init);
    if (!tc.init.empty() && resuming) fmt::print("  started from {}; resuming from its checkpoint\n", tc.init);
    if (tc.rope_theta > 0)
        fmt::print("  RoPE base of the full-attention layers {:g}, positions up to {}\n", tc.rope_theta,
                   mc.max_position_embeddings);
    fmt::print("  data {}: {} train / {} val tokens{}\n", tc.data, data->train().tokens, data->val().tokens,
               data->manifest().loss_mask ? " (loss masks: only completions and assistant turns are learned)" : "");
    if (tc.doc_mask) fmt::print("  document masking: sequences cut at each EOS (id {})\n", data->manifest().eos_id);
    if (const PackedRows *p = trainer.loader().packed())
        fmt::print("  packing: {} whole documents into {} rows of {} tokens (best-fit decreasing){}\n",
                   p->num_documents(), trainer.loader().chunks_per_epoch(), tc.seq + 1,
                   p->truncated() ? fmt::format("; {} longer than a row lose their ends: raise --seq", p->truncated())
                                  : "");
    fmt::print("  {} steps × {} sequences × {} tokens (micro-batch {}), lr {} {} warmup {}, balancing {}, device {}, "
               "matmuls {}{}\n",
               tc.steps, tc.batch, tc.seq, tc.micro(), tc.lr, tc.schedule, tc.warmup_steps(), tc.balance ? "on" : "off",
               tc.device, tc.precision,
               !on_gpu && tc.precision == "bf16" && !cpu::gemm_bf16_native()
                   ? " (this CPU has no bf16 GEMM: operands widened to fp32)"
                   : "");
    if (comm->size() > 1)
        fmt::print("  ranks: {} ({}), {} sequences per rank per forward/backward; collectives move {:.1f} "
                   "MiB per step over the ranks (gradient sums onto owners, updated parameters)\n",
                   comm->size(), comm->name(), tc.micro(),
                   double(data_parallel_bytes_per_step(trainer.optimizer().groups(), comm->size())) / (1 << 20));
    if (tc.context_parallel > 1)
        fmt::print("  context parallel: groups of {} ranks share each sequence, 2 chunks of {} tokens per rank ({} "
                   "group{} data parallel); the keys and values of each layer are all-gathered within a group\n",
                   tc.context_parallel, tc.seq / (2 * tc.context_parallel), comm->size() / tc.context_parallel,
                   comm->size() / tc.context_parallel == 1 ? "" : "s");
    if (comm->size() > 1) { // ZeRO-1: what each rank allocated for its share of the optimizer state
        fmt::print("  optimizer state per rank (ZeRO-1): {} MiB\n",
                   per_rank_mib(*comm, trainer.optimizer().state_bytes(), 2));
    } else {
        fmt::print("  optimizer state {:.2f} MiB\n", double(trainer.optimizer().state_bytes()) / (1 << 20));
    }
    // The asynchronous writer's images: each rank's part of a checkpoint (a 1/N share with N ranks).
    const std::string snapshot =
        !writer ? std::string()
        : comm->size() > 1
            ? fmt::format(" + checkpoint snapshot per rank {} MiB", per_rank_mib(*comm, writer->snapshot_bytes(), 1))
            : fmt::format(" + {:.1f} MiB checkpoint snapshot", double(writer->snapshot_bytes()) / (1 << 20));
    fmt::print("  memory {:.1f} MiB{}, {} threads, {} {:.1f} GFLOP/s\n", double(trainer.memory_bytes()) / (1 << 20),
               snapshot,
               omp_get_max_threads(), on_gpu ? "MFU against H200 dense bf16" : "matmul peak measured now",
               peak / 1e9);
    // On a GPU: what `zaya info --train --device cuda` plans, printed now and held against the peak at the end.
    const size_t planned_gpu =
        on_gpu ? total_bytes(device_train_memory(mc, tc.micro(), tc.seq, int(comm->size()), tc.precision == "bf16",
                                                 tc.doc_mask))
               : 0;
    if (on_gpu)
        fmt::print("  GPU memory planned {:.1f} MiB per rank (zaya info --train --device cuda)\n",
                   double(planned_gpu) / (1 << 20));
    std::fflush(stdout);

    if (resuming) {
        std::string from;
        if (!tc.resume_from.empty()) {
            checkpoint_load(trainer, tc.resume_from);
            from = tc.resume_from;
        } else {
            if (checkpoint_list(tc.out).empty()) fail("--resume: no checkpoint under '{}/checkpoints'", tc.out);
            from = checkpoint_resume(trainer, tc.out, [](const std::string &w) { fmt::print("  warning: {}\n", w); });
        }
        fmt::print("  resumed from {} (step {})\n", from, trainer.step_count());
        if (trainer.step_count() > tc.steps)
            fail("--resume: the checkpoint is at step {}, beyond --steps {}", trainer.step_count(), tc.steps);
        // At exactly --steps (a run killed while writing its model): nothing to train, the model is written again.
    }
    const int64_t start = trainer.step_count();
    // Steps after the checkpoint were lost with the process that took them: their metrics go too.
    if (resuming && root) truncate_metrics(metrics_path, start);
    std::ofstream metrics(metrics_path, resuming ? std::ios::app : std::ios::trunc);
    if (!metrics) fail("cannot write '{}'", metrics_path);

    SupervisorLink link(root); // data parallel: rank 0 speaks for the job
    link.send(fmt::format("ready {}", start));
    if (const int sig = signals.received()) {
        fmt::print("stopped by {} before the first step\n", strsignal(sig));
        return 128 + sig;
    }

    auto report = [&](const SaveReport &r) {
        if (r.ok()) {
            fmt::print("step {:>5}  checkpoint {} ({:.1f} MB written in {:.2f} s)\n", r.step, r.dir, double(r.bytes) / 1e6,
                       r.copy_s + r.write_s);
            link.send(fmt::format("ckpt {}", r.step));
        } else {
            fmt::print("step {:>5}  checkpoint FAILED, training goes on, earlier checkpoints are intact: {}\n", r.step,
                       r.error);
        }
        std::fflush(stdout);
    };
    auto finish_saves = [&] { // waits for the save in flight, if any, and reports it
        if (writer)
            if (auto r = writer->finish()) report(*r);
    };
    auto save = [&](bool wait) { // every rank at the same step (rank 0's report names any rank's failure)
        if (writer) {
            writer->start(trainer);
            if (wait) finish_saves();
            return;
        }
        SaveReport r;
        r.step = trainer.step_count();
        const auto t0 = std::chrono::steady_clock::now();
        try {
            const CheckpointSaved saved = checkpoint_save(trainer, tc.out);
            r.dir = saved.dir;
            r.bytes = saved.bytes;
            if (tc.keep > 0 && root) checkpoint_prune(tc.out, tc.keep); // rank 0's, once the checkpoint is whole
        } catch (const Error &e) {
            r.error = e.what();
        }
        r.write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        report(r);
    };

    // Before stopping early: a complete checkpoint of step s (the periodic one just started, or a new one).
    auto checkpoint_this_step = [&](int64_t s) {
        if (tc.ckpt_every > 0 && s % tc.ckpt_every == 0) finish_saves();
        else save(true);
    };

    const bool tty = isatty(fileno(stdout));
    double elapsed = 0;
    int64_t taken = 0; // steps taken by this process
    auto validate = [&](int64_t step) {
        double vl = trainer.evaluate();
        fmt::print("step {:>5}  val_loss {:.4f}\n", step, vl);
        metrics << nlohmann::json{{"step", step}, {"val_loss", vl}}.dump() << "\n" << std::flush;
        return vl;
    };
    while (trainer.step_count() < tc.steps) {
        batch_log.clear();
        StepResult r = trainer.step(tc.dump_batches ? &batch_log : nullptr);
        const int64_t s = r.step;
        ++taken;
        if (batches_out.is_open())
            batches_out.write(reinterpret_cast<const char *>(batch_log.tokens.data()),
                              std::streamsize(batch_log.tokens.size() * sizeof(int32_t)));
        if (batches_out.is_open() && !batch_log.learned.empty()) {
            if (!learned_out.is_open()) open_dump(learned_out, "batches_learned.bin");
            const std::vector<uint8_t> flags(batch_log.learned.begin(), batch_log.learned.end());
            learned_out.write(reinterpret_cast<const char *>(flags.data()), std::streamsize(flags.size()));
        }
        elapsed += r.seconds;
        const double tok_s = double(r.tokens) / r.seconds;
        const double mfu = trainer.flops_per_step() / r.seconds / (peak * comm->size());
        const double ent = std::accumulate(r.entropy.begin(), r.entropy.end(), 0.0) / double(r.entropy.size());
        const double eta = elapsed / double(taken) * double(tc.steps - s);
        std::string line = fmt::format("step {:>5}/{}  loss {:.4f}  gnorm {:.3f}  lr {:.2e}  {:.0f} tok/s  mfu {:.1f}%  "
                                       "entropy {:.3f}{}  eta {}",
                                       s, tc.steps, r.loss, r.grad_norm, r.lr, tok_s, 100 * mfu, ent,
                                       r.skipped ? fmt::format("  SKIPPED ({})", verdict_name(r.verdict)) : "",
                                       duration(eta));
        if (tty) fmt::print("{} {}\n", progress_bar(s, tc.steps, 20), line);
        else fmt::print("{}\n", line);
        std::fflush(stdout);
        nlohmann::json m{{"step", s},          {"loss", r.loss},   {"lr", r.lr},
                         {"grad_norm", r.grad_norm}, {"tokens_per_s", tok_s}, {"mfu", mfu},
                         {"routing_entropy", r.entropy}, {"skipped", r.skipped}};
        if (r.skipped) m["skip_reason"] = verdict_name(r.verdict);
        if (comm->size() > 1) m["comm_s"] = r.comm_seconds;
        metrics << m.dump() << "\n";
        link.send(fmt::format("step {}", s));
        if (writer)
            for (const SaveReport &rep : writer->poll()) report(rep);

        if (trainer.guard().wants_rollback()) {
            finish_saves();
            comm->barrier(); // every rank sees rank 0's checkpoints complete before choosing one
            if (checkpoint_list(tc.out).empty()) {
                fmt::print("step {:>5}  {} consecutive skipped steps and no checkpoint to roll back to; going on\n", s,
                           trainer.guard().consecutive_skips());
                trainer.guard().clear_skips();
            } else {
                const LoaderState now = trainer.loader_state();
                const std::string from =
                    checkpoint_resume(trainer, tc.out, [](const std::string &w) { fmt::print("  warning: {}\n", w); });
                trainer.restore_loader(now); // the data that caused the spikes is not seen again
                trainer.guard().clear_skips();
                fmt::print("step {:>5}  rolled back to {} (step {}) after repeated spikes; skipping the data window "
                           "since then\n",
                           s, from, trainer.step_count());
                metrics << nlohmann::json{{"step", s}, {"rollback_to", trainer.step_count()}}.dump() << "\n";
                continue;
            }
        }
        if (tc.eval_every > 0 && s % tc.eval_every == 0 && s != tc.steps) validate(s);
        if (tc.ckpt_every > 0 && (s % tc.ckpt_every == 0 || s == tc.steps)) save(/*wait=*/s == tc.steps);
        int64_t stop = signals.received();
        if (comm->size() > 1) { // all ranks stop after the same step (a rank left behind would wait forever)
            // ... and by the same signal when the ranks that got one agree (mpirun forwards SIGUSR1 to every rank,
            // not all before this step), so that every rank exits with the same status.
            int64_t seen[2] = {stop != 0, stop};
            comm->allreduce_sum(seen, 2);
            if (seen[0] && !stop) stop = seen[1] % seen[0] == 0 ? seen[1] / seen[0] : SIGTERM;
        }
        if (const int sig = int(stop)) {
            metrics.flush();
            checkpoint_this_step(s);
            fmt::print("stopped by {} after step {}; continue with --resume\n", strsignal(sig), s);
            std::fflush(stdout);
            if (comm->size() > 1) {
                // Together: a rank exiting non-zero makes mpirun kill the others (rank 0 might still be writing),
                // and the SIGTERM it sends a rank that is exiting anyway must not turn into a second stop signal.
                comm->barrier();
                signals.ignore_further();
            }
            return 128 + sig;
        }
        if (tc.stop_after > 0 && taken == tc.stop_after && s != tc.steps) {
            metrics.flush();
            checkpoint_this_step(s);
            fmt::print("stopped after {} steps as asked (--stop-after); continue with --resume\n", tc.stop_after);
            return 0;
        }
    }
    metrics.flush();
    double final_val = validate(tc.steps);
    // Peak resident memory of every rank (ZeRO-1 shrinks each rank's optimizer share), and of every rank's GPU.
    fmt::print("peak resident memory per rank: {} MiB\n", per_rank_mib(*comm, process_peak_rss_bytes(), 1));
    if (on_gpu)
        fmt::print("peak GPU memory per rank: {} MiB (zaya's allocations; planned {:.1f} MiB)\n",
                   per_rank_mib(*comm, backend_named(tc.device).peak_device_bytes(), 1),
                   double(planned_gpu) / (1 << 20));
    if (!root) return 0;

    const std::string model_dir = (fs::path(tc.out) / "model").string();
    model_save(trainer.model(), model_dir, DType::F32);
    fs::copy_file(data->tokenizer_path(), fs::path(model_dir) / data->manifest().tokenizer,
                  fs::copy_options::overwrite_existing, ec);
    if (ec) fail("cannot copy the tokenizer into '{}': {}", model_dir, ec.message());
    HfChatTemplate::copy_files(fs::path(data->tokenizer_path()).parent_path().string(), model_dir);
    fmt::print("trained {} steps in {}; final val_loss {:.4f}; model written to {}\n", tc.steps, duration(elapsed),
               final_val, model_dir);

    if (tc.sample_tokens > 0) {
        Model copy = Model::create(trainer.model().config);
        std::copy_n(trainer.model().params.data(), copy.layout.total, copy.params.data());
        Engine engine(InferModel::from_model(std::move(copy), DType::F32), Tokenizer::load(data->tokenizer_path()),
                      EngineOptions{1, 256});
        const Tokenizer &tok = *engine.tokenizer();
        SampleOptions so;
        so.max_new_tokens = tc.sample_tokens;
        so.seed = tc.seed;
        so.stop_tokens = engine.default_stop_tokens();
        std::vector<int32_t> prompt;
        if (tc.sample_chat) { // the user's turn, then the model's (data/chat_template.h)
            prompt = chat_prompt(tok, {{"user", tc.sample_prompt}}, int32_t(mc.bos_token_id));
            so.stop_strings = chat_stop_strings(tok);
            fmt::print("sample (chat, temperature {}, top-k {}):\nuser: {}\nmodel: ", so.temperature, so.top_k,
                       tc.sample_prompt);
        } else {
            prompt = tok.encode(tc.sample_prompt);
            if (mc.bos_token_id >= 0) prompt.insert(prompt.begin(), int32_t(mc.bos_token_id));
            fmt::print("sample (temperature {}, top-k {}):\n{}", so.temperature, so.top_k, tc.sample_prompt);
        }
        std::fflush(stdout);
        generate_one(engine, prompt, so, [](int32_t, const std::string &text, const Completion &) {
            fmt::print("{}", text);
            std::fflush(stdout);
        });
        fmt::print("\n");
    }
    return 0;
}

} // namespace

int run_training(const TrainConfig &tc_in) {
    StopSignals signals; // from the start (before MPI's threads exist): a signal during set-up stops after it
    tc_in.validate();
    // Data parallel: every rank trains; rank 0 alone prints, writes metrics, checkpoints and the model.
    std::shared_ptr<Communicator> comm = communicator_from_environment();
    if (comm->size() > 1) comm->set_watchdog(tc_in.comm_timeout);
    return run_or_abort_job(*comm, [&] { return train(tc_in, signals, comm); });
}

} // namespace zaya
