// zaya serve MODEL [--host 127.0.0.1] [--port 8080] [--api-key KEY] — the OpenAI-compatible server.
#include "cli/commands.h"
#include "cli/infer_args.h"
#include "core/error.h"
#include "infer/answer_formats.h"
#include "infer/fingerprint.h"
#include "infer/server.h"
#include "train/signals.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <thread>

namespace zaya::cli {

namespace {

struct ServeArgs {
    InferModelArgs model;
    ServerOptions server;
    EngineOptions engine;
    std::string model_name;
};

void run_serve(ServeArgs a) {
    // Signals first: every thread created from here on inherits the blocked mask (train/signals.h).
    StopSignals signals;
    auto model = load_infer_model(a.model);
    std::optional<Tokenizer> tok = load_infer_tokenizer(a.model);
    a.server.chat_template_kwargs = chat_variables(a.model.chat_template_kwargs);
    a.server.tool_format = resolve_tool_format(tok ? &*tok : nullptr, a.model.tool_call_parser);
    a.server.reasoning = resolve_reasoning(tok ? &*tok : nullptr, a.model.reasoning_parser);
    const ZayaConfig c = model->config;
    a.server.model_name = !a.model_name.empty() ? a.model_name
                                                : std::filesystem::path(a.model.model).filename().string();
    if (a.server.model_name.empty()) a.server.model_name = "zaya";
    if (a.server.api_key.empty())
        if (const char *env = std::getenv("ZAYA_API_KEY")) a.server.api_key = env;
    Engine engine(std::move(model), std::move(tok), a.engine);
    Server server(engine, a.server);
    const int port = server.bind();
    std::thread engine_thread([&] { engine.serve_forever(); });
    std::thread http_thread([&] { server.run(); });
    fmt::print("zaya serve: model '{}' ({} layers, {} weights {:.1f} MiB, {} inputs, tokenizer: {}), batch ≤ {}, "
               "context {} ({} KV cache), prompts fed {} tokens per step{}, on {}\n",
               a.server.model_name, c.num_hidden_layers, dtype_name(engine.model().weight_dtype),
               double(engine.model().matrix_bytes()) / (1 << 20),
               engine.matmul_inputs(),
               engine.tokenizer() ? engine.tokenizer()->path() : "none",
               engine.max_batch(), engine.max_context(), dtype_name(engine.kv_dtype()), engine.prefill_chunk(),
               engine.sole_prefill_chunk() == engine.prefill_chunk()
                   ? ""
                   : fmt::format(" ({} while no other request decodes)", engine.sole_prefill_chunk()),
               engine.device());
    if (engine.tokenizer()) fmt::print("chat answers: {}\n", answer_formats_summary(a.server.tool_format,
                                                                                   a.server.reasoning));
    if (!engine.prefix_cache_stats())
        fmt::print("prefix cache: off\n");
    else if (a.engine.device == "cuda")
        fmt::print("prefix cache: finished sequences stay in their device slots until a request needs one; a prompt "
                   "that continues one whole resumes it\n");
    else
        fmt::print("prefix cache: up to {} MiB of finished sequences, resumable every {} tokens\n",
                   a.engine.prefix_cache_bytes >> 20, a.engine.prefix_cache_stride);
    if (engine.lookup().tokens > 0)
        fmt::print("speculative decoding: prompt lookup, drafts of up to {} tokens after a repeated run of {} to {}{}\n",
                   engine.lookup().tokens, engine.lookup().min_ngram, engine.lookup().max_ngram,
                   engine.lookup().history > 0
                       ? fmt::format(" (also of the last {} requests)", engine.lookup().history)
                       : "");
    if (engine.batch_invariant())
        fmt::print("batch-invariant: a request's tokens and log-probabilities do not depend on the requests beside it "
                   "(every op on its per-row path)\n");
    fmt::print("system_fingerprint: {}\n", system_fingerprint(engine));
    fmt::print("listening on http://{}:{} (POST /v1/completions, /v1/chat/completions, /v1/responses; GET /v1/models, "
               "/health, /metrics)\n",
               a.server.host, port);
    std::fflush(stdout);
    while (!signals.received()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    fmt::print("zaya serve: signal {}, shutting down\n", signals.received());
    server.stop();
    engine.shutdown();
    http_thread.join();
    engine_thread.join();
}

} // namespace

void register_serve(CLI::App &app) {
    auto *cmd = app.add_subcommand("serve",
                                   "OpenAI-compatible HTTP server (completions, chat, responses, streaming, batching)");
    auto a = std::make_shared<ServeArgs>();
    add_model_options(cmd, a->model);
    cmd->add_option("--host", a->server.host, "Address to listen on (loopback by default)")->capture_default_str();
    cmd->add_option("--port", a->server.port, "Port (0 = any free port; the chosen one is printed)")
        ->capture_default_str();
    cmd->add_option("--api-key", a->server.api_key, "Require 'Authorization: Bearer KEY' (or set ZAYA_API_KEY)");
    cmd->add_option("--model-name", a->model_name, "Model id reported by /v1/models (default: the directory name)");
    cmd->add_option("--max-batch", a->engine.max_batch, "Requests decoded together at most (8 at most with --device cuda)")
        ->capture_default_str();
    cmd->add_option("--prefill-chunk", a->engine.prefill_chunk,
                    "Prompt tokens fed per step, the most a long prompt delays the others' steps by (default: 256 on "
                    "cpu, 1024 while no other request decodes; 2048 on cuda: one GEMM prefill pass)");
    add_engine_device_options(cmd, a->engine);
    add_prefix_cache_option(cmd, a->engine.prefix_cache_bytes);
    cmd->add_option("--max-body", a->server.max_body_bytes, "Largest request body in bytes")->capture_default_str();
    add_mib_option(cmd, "--responses-store-mb", a->server.responses_store_bytes, 64,
                   "MiB of finished /v1/responses kept in memory for previous_response_id and GET "
                   "/v1/responses/{id}, the oldest dropped first (0: none kept)");
    cmd->callback([a] { run_serve(*a); });
}

} // namespace zaya::cli
