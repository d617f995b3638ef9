#include "infer/server.h"

#include "core/error.h"
#include "infer/answer_formats.h"
#include "infer/chat_answer.h"
#include "infer/fingerprint.h"
#include "infer/openai_api.h"
#include "infer/response_store.h"
#include "infer/responses_api.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <fmt/format.h>
#include <mutex>
#include <optional>

namespace zaya {

using nlohmann::json;

namespace {

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

void send_error(httplib::Response &res, const ApiError &e) {
    res.status = e.status;
    res.set_content(e.body().dump(), "application/json");
}

// What the engine thread hands to one HTTP thread: text deltas with their tokens' log-probabilities, then the
// completion.
struct Channel {
    struct Delta {
        std::string text;
        std::vector<TokenLogprobs> logprobs;
    };
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Delta> deltas;
    std::optional<Completion> done;
    std::optional<std::vector<TokenLogprobs>> prompt_logprobs; // set with the first token (the prompt is done)
    size_t logprobs_sent = 0; // the completion's log-probabilities already in a delta

    // On the engine thread, for each token: the text it releases goes out with the log-probabilities not yet sent.
    void push(const std::string &text, const Completion &so_far) {
        std::lock_guard lock(mu);
        if (!prompt_logprobs) {
            prompt_logprobs = so_far.prompt_logprobs;
            cv.notify_all();
        }
        if (text.empty()) return;
        deltas.push_back({text, {so_far.logprobs.begin() + std::ptrdiff_t(logprobs_sent), so_far.logprobs.end()}});
        logprobs_sent = so_far.logprobs.size();
        cv.notify_all();
    }
    void finish(const Completion &c) {
        std::lock_guard lock(mu);
        done = c;
        cv.notify_all();
    }
    // On an HTTP thread: waits for deltas or the end, and takes what came.
    struct Taken {
        std::deque<Delta> deltas;
        std::optional<Completion> done;
        size_t logprobs_sent = 0;
    };
    Taken take() {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return !deltas.empty() || done.has_value(); });
        Taken t;
        t.deltas.swap(deltas);
        t.done = done;
        t.logprobs_sent = logprobs_sent;
        return t;
    }
};

enum class Endpoint : uint8_t { Completions, Chat, Responses };

// A Responses stream: typed events ("event: response.output_text.delta" and its data), no [DONE] line.
void stream_response_events(Engine &engine, httplib::Response &res, std::shared_ptr<Channel> ch, uint64_t id,
                            std::shared_ptr<ResponsesStream> stream, std::function<void(const json &)> finished) {
    auto opened = std::make_shared<bool>(false);
    res.set_chunked_content_provider(
        "text/event-stream", [&engine, ch, id, stream, opened, finished](size_t, httplib::DataSink &sink) {
            auto send = [&](const std::vector<json> &events) {
                for (const json &e : events) {
                    const std::string line =
                        "event: " + e["type"].get<std::string>() + "\ndata: " + e.dump() + "\n\n";
                    if (!sink.write(line.data(), line.size())) return false;
                }
                return true;
            };
            if (!*opened) {
                *opened = true;
                if (!send(stream->open())) return engine.cancel(id), false;
            }
            const auto [deltas, done, unused] = ch->take();
            for (const Channel::Delta &d : deltas)
                if (!send(stream->feed(d.text, d.logprobs))) return engine.cancel(id), false; // the client left
            if (done && done->finish_reason == "error") {
                send({{{"type", "error"}, {"code", "server_error"}, {"message", "generation failed: " + done->error},
                       {"param", nullptr}}});
                sink.done();
            } else if (done) {
                const std::vector<json> events = stream->finish(*done);
                finished(events.back()["response"]);
                send(events);
                sink.done();
            }
            return true;
        });
}

std::atomic<uint64_t> g_request_counter{0};

// The request's prompts as token ids — a chat's turns in the model's chat format (data/chat_template.h; its stop
// strings added to the request), a text prompt BOS then its encoding — and, when the request echoes, each one's
// text. Throws ApiError.
std::vector<std::vector<int32_t>> prompt_ids(ApiRequest &r, const Tokenizer *tok, int32_t bos,
                                             std::vector<std::string> &texts) {
    std::vector<std::vector<int32_t>> out;
    if (r.chat) {
        if (!tok) throw ApiError(400, "this model has no tokenizer: send 'prompt' as token ids", "messages");
        out.push_back(chat_prompt(*tok, r.messages, bos, r.chat_template_kwargs));
        for (std::string &stop : chat_stop_strings(*tok)) r.sample.stop_strings.push_back(std::move(stop));
        return out;
    }
    for (const ApiPrompt &p : r.prompts) {
        if (!p.ids.empty()) {
            out.push_back(p.ids);
            if (r.echo) texts.push_back(tok ? tok->decode(p.ids) : "");
            continue;
        }
        if (!tok) throw ApiError(400, "this model has no tokenizer: send 'prompt' as token ids", "prompt");
        out.push_back(text_prompt(*tok, p.text, /*chat=*/false, "", bos));
        if (r.echo) texts.push_back(p.text);
    }
    return out;
}

// The server's chat template variables under the request's own.
void add_default_variables(ApiRequest &r, const nlohmann::ordered_json &defaults) {
    if (!r.chat || defaults.is_null()) return;
    nlohmann::ordered_json merged = defaults;
    if (r.chat_template_kwargs.is_object())
        for (const auto &[k, v] : r.chat_template_kwargs.items()) merged[k] = v;
    r.chat_template_kwargs = std::move(merged);
}

} // namespace

Server::Server(Engine &engine, ServerOptions opts)
    : engine_(engine), opts_(std::move(opts)), http_(std::make_unique<httplib::Server>()),
      stored_(std::make_unique<ResponseStore>(opts_.responses_store_bytes)), fingerprint_(system_fingerprint(engine)) {
    const int threads = opts_.http_threads;
    http_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
    http_->set_payload_max_length(opts_.max_body_bytes);
    routes();
}

Server::~Server() = default;

int Server::bind() {
    int port = opts_.port;
    if (port == 0) port = http_->bind_to_any_port(opts_.host);
    else if (!http_->bind_to_port(opts_.host, port)) port = -1;
    if (port < 0)
        fail("cannot listen on {}:{} (address in use, or not an address of this machine)", opts_.host, opts_.port);
    return port;
}

void Server::run() { http_->listen_after_bind(); }

void Server::stop() { http_->stop(); }

std::string Server::metrics_text() const {
    const Engine::Totals t = engine_.totals();
    std::string out;
    auto metric = [&](const char *name, const char *type, const char *help, const std::string &samples) {
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}", name, help, name, type, samples);
    };
    auto one = [](const char *name, auto value) { return fmt::format("{} {}\n", name, value); };
    std::string by_reason;
    for (const auto &[reason, n] : {std::pair{"stop", t.stop}, {"length", t.length}, {"cancelled", t.cancelled},
                                    {"error", t.error}})
        by_reason += fmt::format("zaya_requests_total{{finish_reason=\"{}\"}} {}\n", reason, n);
    metric("zaya_requests_total", "counter", "Requests finished, by finish reason.", by_reason);
    metric("zaya_prompt_tokens_total", "counter", "Prompt tokens of the finished requests.",
           one("zaya_prompt_tokens_total", t.prompt_tokens));
    metric("zaya_prompt_tokens_cached_total", "counter",
           "Of those, the tokens resumed from the prefix cache instead of computed.",
           one("zaya_prompt_tokens_cached_total", t.cached_tokens));
    metric("zaya_generation_tokens_total", "counter", "Tokens generated by the finished requests.",
           one("zaya_generation_tokens_total", t.generated_tokens));
    metric("zaya_prefill_seconds_total", "counter", "Time from submission to the first token, summed over requests.",
           one("zaya_prefill_seconds_total", t.prefill_seconds));
    metric("zaya_decode_seconds_total", "counter", "Time from the first token to the last, summed over requests.",
           one("zaya_decode_seconds_total", t.decode_seconds));
    metric("zaya_requests_active", "gauge", "Requests queued or running.",
           one("zaya_requests_active", engine_.active()));
    metric("zaya_batch_max_seen", "gauge", "The most sequences one forward has fed.",
           one("zaya_batch_max_seen", engine_.max_batch_seen()));
    if (engine_.lookup().tokens > 0) {
        metric("zaya_spec_decode_draft_tokens_total", "counter",
               "Tokens drafted by prompt lookup (speculative decoding) for the finished requests.",
               one("zaya_spec_decode_draft_tokens_total", t.draft_tokens));
        metric("zaya_spec_decode_accepted_tokens_total", "counter",
               "Of those, the tokens the model drew alike (taken without a step of their own).",
               one("zaya_spec_decode_accepted_tokens_total", t.accepted_tokens));
    }
    if (const auto p = engine_.prefix_cache_stats()) {
        metric("zaya_prefix_cache_entries", "gauge", "Finished sequences kept for reuse.",
               one("zaya_prefix_cache_entries", p->entries));
        metric("zaya_prefix_cache_bytes", "gauge", "Host bytes they hold.", one("zaya_prefix_cache_bytes", p->bytes));
        metric("zaya_prefix_cache_hits_total", "counter", "Prompts that resumed from one.",
               one("zaya_prefix_cache_hits_total", p->hits));
    }
    return out;
}

void Server::routes() {
    httplib::Server &s = *http_;
    s.set_error_handler([](const httplib::Request &req, httplib::Response &res) {
        if (!res.body.empty()) return;
        ApiError e(res.status, "");
        if (res.status == 404) e.message = "no route " + req.method + " " + req.path;
        else if (res.status == 405) e.message = "method " + req.method + " not allowed on " + req.path;
        else if (res.status == 413) e.message = "request body too large";
        else e.message = "HTTP " + std::to_string(res.status);
        send_error(res, e);
    });
    s.set_exception_handler([](const httplib::Request &, httplib::Response &res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception &ex) {
            what = ex.what();
        } catch (...) {
        }
        send_error(res, ApiError(500, what, "", "server_error"));
    });
    auto authorised = [this](const httplib::Request &req, httplib::Response &res) {
        if (opts_.api_key.empty() || req.get_header_value("Authorization") == "Bearer " + opts_.api_key) return true;
        send_error(res, ApiError(401, "invalid or missing API key (Authorization: Bearer <key>)", "",
                                 "invalid_request_error", "invalid_api_key"));
        return false;
    };

    s.Get("/health", [this](const httplib::Request &, httplib::Response &res) {
        json j = {{"status", "ok"}, {"requests", engine_.active()}, {"max_batch_seen", engine_.max_batch_seen()}};
        j["prefix_cache"] = nullptr;
        if (const auto p = engine_.prefix_cache_stats())
            j["prefix_cache"] = {{"entries", p->entries}, {"bytes", p->bytes},         {"max_bytes", p->max_bytes},
                                 {"hits", p->hits},       {"tokens_reused", p->tokens_reused}};
        res.set_content(j.dump(), "application/json");
    });
    // Prometheus' text format (as vLLM's and llama.cpp's servers offer): the engine's totals and gauges.
    s.Get("/metrics", [this](const httplib::Request &, httplib::Response &res) {
        res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
    s.Get("/v1/models", [this, authorised](const httplib::Request &req, httplib::Response &res) {
        if (!authorised(req, res)) return;
        json model = {{"id", opts_.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "zaya"}};
        res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(), "application/json");
    });

    // vLLM's /tokenize and /detokenize: a prompt's ids as the completions and chat endpoints make them (BOS first
    // unless "add_special_tokens" is false; "messages" in the chat format with the generation prompt), and ids back
    // to text.
    s.Post("/tokenize", [this, authorised](const httplib::Request &req, httplib::Response &res) {
        if (!authorised(req, res)) return;
        try {
            const json body = json::parse(req.body, nullptr, false);
            const bool chat = body.is_object() && body.contains("messages");
            ApiRequest r = parse_api_request(req.body, chat, engine_.max_context(), opts_.tool_format);
            if (r.prompts.size() > 1) throw ApiError(400, "/tokenize takes one prompt", "prompt");
            add_default_variables(r, opts_.chat_template_kwargs);
            const json special = body.value("add_special_tokens", json(true));
            if (!special.is_boolean())
                throw ApiError(400, "'add_special_tokens' must be a boolean", "add_special_tokens");
            const int32_t bos = special.get<bool>() ? int32_t(engine_.model().config.bos_token_id) : -1;
            std::vector<std::string> texts;
            const std::vector<int32_t> ids = prompt_ids(r, engine_.tokenizer(), bos, texts).at(0);
            const json j = {{"count", ids.size()}, {"max_model_len", engine_.max_context()}, {"tokens", ids}};
            res.set_content(j.dump(), "application/json");
        } catch (const ApiError &e) {
            send_error(res, e);
        } catch (const Error &e) {
            send_error(res, ApiError(400, e.what(), "prompt"));
        }
    });
    s.Post("/detokenize", [this, authorised](const httplib::Request &req, httplib::Response &res) {
        if (!authorised(req, res)) return;
        const json j = json::parse(req.body, nullptr, false);
        if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array())
            return send_error(res, ApiError(400, "'tokens' must be an array of token ids", "tokens"));
        const Tokenizer *tok = engine_.tokenizer();
        if (!tok) return send_error(res, ApiError(400, "this model has no tokenizer", "tokens"));
        std::vector<int32_t> ids;
        for (const json &t : j["tokens"]) {
            if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok->vocab_size())
                return send_error(res, ApiError(400, "'tokens' must hold ids in [0, " +
                                                         std::to_string(tok->vocab_size()) + "), got " + t.dump(),
                                                "tokens"));
            ids.push_back(int32_t(t.get<int64_t>()));
        }
        res.set_content(json{{"prompt", tok->decode(ids)}}.dump(-1, ' ', false, json::error_handler_t::replace),
                        "application/json");
    });

    auto generate = [this, authorised](Endpoint endpoint) {
        return [this, authorised, endpoint](const httplib::Request &req, httplib::Response &res) {
            if (!authorised(req, res)) return;
            const bool chat = endpoint != Endpoint::Completions, responses = endpoint == Endpoint::Responses;
            const Tokenizer *tok = engine_.tokenizer();
            ApiRequest r;
            ResponsesRequest q; // Responses: the request's conversation and the fields its Response repeats
            std::vector<std::vector<int32_t>> prompts;
            std::vector<std::string> echoes; // each prompt's text, when echoed
            try {
                if (responses) {
                    q = parse_responses_request(req.body, engine_.max_context(),
                                                [this](const std::string &id) -> std::optional<EarlierResponse> {
                                                    const auto e = stored_->get(id);
                                                    if (!e) return std::nullopt;
                                                    return earlier_response(e->conversation, e->input_items,
                                                                            e->response);
                                                },
                                                opts_.tool_format);
                    r = q.api;
                } else {
                    r = parse_api_request(req.body, chat, engine_.max_context(), opts_.tool_format);
                }
                add_default_variables(r, opts_.chat_template_kwargs);
                const auto bos = int32_t(engine_.model().config.bos_token_id);
                prompts = prompt_ids(r, tok, bos, echoes);
                // truncation "auto": the fewest oldest turns dropped that make the prompt fit the context (if none
                // does, the engine refuses the prompt, saying how long it is).
                const auto fits = [&](const std::vector<int32_t> &p) {
                    return int64_t(p.size()) < engine_.max_context();
                };
                if (responses && q.truncate && !fits(prompts[0])) {
                    drop_turns_to_fit(r, [&](const ApiRequest &fewer) {
                        return fits(chat_prompt(*tok, fewer.messages, bos, r.chat_template_kwargs));
                    });
                    prompts[0] = chat_prompt(*tok, r.messages, bos, r.chat_template_kwargs);
                }
                if (chat && opts_.reasoning)
                    expect_reasoning(r, *opts_.reasoning,
                                     prompt_ids_open_reasoning(*tok, prompts[0], *opts_.reasoning));
                const int64_t V = engine_.model().config.vocab_size;
                for (const auto &[token, bias] : r.sample.logit_bias)
                    if (token >= V)
                        throw ApiError(400, fmt::format("token {} is outside the vocabulary [0, {})", token, V),
                                       "logit_bias");
                for (int32_t t : engine_.default_stop_tokens()) r.sample.stop_tokens.push_back(t);
            } catch (const ApiError &e) {
                send_error(res, e);
                return;
            } catch (const Error &e) {
                send_error(res, ApiError(400, e.what(), responses ? "input" : chat ? "messages" : "prompt"));
                return;
            }
            // Every choice is its own engine request (they are batched together): each prompt n times, the j-th
            // with seed + j, so a prompt's first choice is what a request of it alone gives.
            std::vector<std::shared_ptr<Channel>> channels;
            std::vector<uint64_t> ids;
            std::vector<size_t> prompt_of; // each choice's prompt
            try {
                for (size_t i = 0; i < prompts.size(); ++i)
                    for (int64_t j = 0; j < r.n; ++j) {
                        auto ch = std::make_shared<Channel>();
                        SampleOptions o = r.sample;
                        o.seed += uint64_t(j);
                        ids.push_back(engine_.submit(
                            prompts[i], o,
                            [ch](int32_t, const std::string &text, const Completion &so_far) {
                                ch->push(text, so_far);
                            },
                            [ch](const Completion &done) { ch->finish(done); }));
                        channels.push_back(ch);
                        prompt_of.push_back(i);
                    }
            } catch (const Error &e) {
                for (uint64_t id : ids) engine_.cancel(id);
                send_error(res, ApiError(400, e.what(), chat ? "messages" : "prompt"));
                return;
            }
            const std::string rid =
                (responses ? "resp_" : chat ? "chatcmpl-" : "cmpl-") + std::to_string(++g_request_counter);
            const int64_t created = unix_now();
            const SpellToken spell = [tok](int32_t id) {
                if (!tok || id >= tok->vocab_size()) return TokenSpelling{"", "token_id:" + std::to_string(id)};
                return TokenSpelling{tok->token_bytes(id), tok->piece(id)};
            };
            if (!r.stream) {
                std::vector<ApiChoice> choices;
                for (size_t i = 0; i < channels.size(); ++i) {
                    Channel &ch = *channels[i];
                    std::unique_lock lock(ch.mu);
                    ch.cv.wait(lock, [&] { return ch.done.has_value(); });
                    const size_t k = prompt_of[i];
                    choices.push_back(
                        {*ch.done, r.echo ? echoes[k] : "", r.echo ? prompts[k] : std::vector<int32_t>{}});
                }
                for (const ApiChoice &c : choices)
                    if (c.completion.finish_reason == "error") {
                        send_error(res, ApiError(500, "generation failed: " + c.completion.error, "", "server_error"));
                        return;
                    }
                if (responses) {
                    const json out = responses_response(r, q.echoed, rid, created, opts_.model_name,
                                                        choices[0].completion, spell);
                    keep_response(q, rid, out);
                    res.set_content(out.dump(), "application/json");
                    return;
                }
                json out = completion_response(r, rid, created, opts_.model_name, choices, spell);
                out["system_fingerprint"] = fingerprint_;
                res.set_content(out.dump(), "application/json");
                return;
            }
            res.set_header("Cache-Control", "no-cache");
            if (responses) {
                stream_response_events(engine_, res, channels[0], ids[0],
                                       std::make_shared<ResponsesStream>(r, q.echoed, rid, created, opts_.model_name,
                                                                         spell),
                                       [this, q, rid](const json &out) { keep_response(q, rid, out); });
                return;
            }
            // What the stream has sent: the opening (a chat's role, an echoed prompt) and the text offset so far.
            struct Sent {
                bool opened = false;
                int64_t offset = 0;
                // a chat's answer: its reasoning, words and calls, as they come (infer/chat_answer.h)
                ChatAnswerStream answer;
            };
            auto sent = std::make_shared<Sent>(Sent{false, 0, ChatAnswerStream(r)});
            const std::shared_ptr<Channel> ch = channels[0];
            const uint64_t id = ids[0];
            const std::vector<int32_t> prompt = prompts[0];
            const std::string echo = r.echo ? echoes[0] : "";
            res.set_chunked_content_provider(
                "text/event-stream",
                [this, ch, r, rid, created, id, sent, spell, prompt, echo](size_t, httplib::DataSink &sink) {
                    auto send = [&](json j) {
                        if (j.contains("choices")) j["system_fingerprint"] = fingerprint_; // (an error has none)
                        const std::string line = "data: " + j.dump() + "\n\n";
                        return sink.write(line.data(), line.size());
                    };
                    const bool lp = r.sample.logprobs >= 0;
                    auto logprobs = [&](std::span<const TokenLogprobs> l) {
                        return lp ? api_logprobs(r.chat, l, spell, &sent->offset) : json(nullptr);
                    };
                    if (!sent->opened && r.chat) { // OpenAI opens a chat stream with the role
                        json j = stream_chunk(r, rid, created, opts_.model_name, "", nullptr);
                        j["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
                        if (!send(j)) return engine_.cancel(id), false;
                    }
                    if (!sent->opened && r.echo) { // an echoed prompt, once its log-probabilities are known
                        json l = nullptr;
                        if (lp) {
                            std::unique_lock lock(ch->mu);
                            ch->cv.wait(lock, [&] { return ch->prompt_logprobs || ch->done; });
                            const std::vector<TokenLogprobs> pl =
                                ch->prompt_logprobs ? *ch->prompt_logprobs : ch->done->prompt_logprobs;
                            lock.unlock();
                            l = api_logprobs(false, pl, spell, &sent->offset, prompt[0]);
                        }
                        if (!send(stream_chunk(r, rid, created, opts_.model_name, echo, nullptr, l)))
                            return engine_.cancel(id), false;
                    }
                    sent->opened = true;
                    const auto [deltas, done, rest] = ch->take();
                    // A chat's answer goes out read: its reasoning as reasoning_content, its words as content, its
                    // calls as tool_calls deltas; the tokens of what was held back or of the calls' markers still
                    // send their log-probabilities.
                    auto piece_chunk = [&](const ChatPiece &piece, const json &l) {
                        json j = stream_chunk(r, rid, created, opts_.model_name, "", nullptr, l);
                        j["choices"][0]["delta"] = chat_delta(piece, tool_call_prefix(rid, 0));
                        return j;
                    };
                    for (const Channel::Delta &d : deltas) {
                        if (!r.chat) {
                            if (!send(stream_chunk(r, rid, created, opts_.model_name, d.text, nullptr,
                                                   logprobs(d.logprobs))))
                                return engine_.cancel(id), false; // the client went away: stop generating
                            continue;
                        }
                        const ChatPiece piece = sent->answer.feed(d.text);
                        if (piece.empty() && !lp) continue;
                        if (!send(piece_chunk(piece, logprobs(d.logprobs)))) return engine_.cancel(id), false;
                    }
                    if (done && done->finish_reason == "error") {
                        send(ApiError(500, "generation failed: " + done->error, "", "server_error").body());
                        sink.done();
                    } else if (done) { // with the log-probabilities of tokens whose text was never released
                        Completion last = *done;
                        if (r.chat) { // the finish reason of calls; what was held back, sent as it is
                            last.finish_reason = sent->answer.finish_reason(done->finish_reason);
                            const ChatPiece held = sent->answer.finish();
                            if (!held.empty() && !send(piece_chunk(held, nullptr))) return engine_.cancel(id), false;
                        }
                        const std::span<const TokenLogprobs> left(done->logprobs.begin() + std::ptrdiff_t(rest),
                                                                  done->logprobs.end());
                        send(stream_chunk(r, rid, created, opts_.model_name, "", &last,
                                          left.empty() ? json(nullptr) : logprobs(left)));
                        const std::string end = "data: [DONE]\n\n";
                        sink.write(end.data(), end.size());
                        sink.done();
                    }
                    return true;
                });
        };
    };
    s.Post("/v1/completions", generate(Endpoint::Completions));
    s.Post("/v1/chat/completions", generate(Endpoint::Chat));
    s.Post("/v1/responses", generate(Endpoint::Responses));
    s.Get(R"(/v1/responses/([^/]+))", [this, authorised](const httplib::Request &req, httplib::Response &res) {
        if (!authorised(req, res)) return;
        if (const auto e = stored_->get(req.matches[1].str()))
            res.set_content(e->response.dump(), "application/json");
        else
            send_error(res, ApiError(404, "no stored response '" + req.matches[1].str() + "'", "response_id"));
    });
    s.Get(R"(/v1/responses/([^/]+)/input_items)", [this, authorised](const httplib::Request &req,
                                                                     httplib::Response &res) {
        if (!authorised(req, res)) return;
        const std::string id = req.matches[1].str();
        const auto e = stored_->get(id);
        if (!e) return send_error(res, ApiError(404, "no stored response '" + id + "'", "response_id"));
        try {
            res.set_content(input_items_page(e->input_items, id, req.get_param_value("limit"),
                                             req.get_param_value("order"), req.get_param_value("after"))
                                .dump(),
                            "application/json");
        } catch (const ApiError &err) {
            send_error(res, err);
        }
    });
    s.Delete(R"(/v1/responses/([^/]+))", [this, authorised](const httplib::Request &req, httplib::Response &res) {
        if (!authorised(req, res)) return;
        const std::string id = req.matches[1].str();
        if (stored_->erase(id))
            res.set_content(json{{"id", id}, {"object", "response.deleted"}, {"deleted", true}}.dump(),
                            "application/json");
        else
            send_error(res, ApiError(404, "no stored response '" + id + "'", "response_id"));
    });
}

void Server::keep_response(const ResponsesRequest &q, const std::string &id, const json &response) {
    if (!q.store || !stored_->enabled()) return;
    stored_->put(id, {response, answered_conversation(q, response), listed_input_items(q, id)});
}

} // namespace zaya
