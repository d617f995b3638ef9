#include "infer/server.h"

#include "core/error.h"
#include "infer/openai_api.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
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

// What the engine thread hands to one HTTP thread: text deltas, then the completion.
struct Channel {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::string> deltas;
    std::optional<Completion> done;

    void push(const std::string &text) {
        std::lock_guard lock(mu);
        deltas.push_back(text);
        cv.notify_all();
    }
    void finish(const Completion &c) {
        std::lock_guard lock(mu);
        done = c;
        cv.notify_all();
    }
};

std::atomic<uint64_t> g_request_counter{0};

} // namespace

Server::Server(Engine &engine, ServerOptions opts)
    : engine_(engine), opts_(std::move(opts)), http_(std::make_unique<httplib::Server>()) {
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
    if (port < 0) fail("cannot listen on {}:{} (address in use, or not an address of this machine)", opts_.host, opts_.port);
    return port;
}

void Server::run() { http_->listen_after_bind(); }

void Server::stop() { http_->stop(); }

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
        res.set_content(j.dump(), "application/json");
    });
    s.Get("/v1/models", [this, authorised](const httplib::Request &req, httplib::Response &res) {
        if (!authorised(req, res)) return;
        json model = {{"id", opts_.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "zaya"}};
        res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(), "application/json");
    });

    auto generate = [this, authorised](bool chat) {
        return [this, authorised, chat](const httplib::Request &req, httplib::Response &res) {
            if (!authorised(req, res)) return;
            const ZayaConfig &c = engine_.model().config;
            const Tokenizer *tok = engine_.tokenizer();
            ApiRequest r;
            std::vector<int32_t> prompt;
            try {
                r = parse_api_request(req.body, chat, engine_.max_context());
                if ((chat || !r.prompt_text.empty()) && !tok)
                    throw ApiError(400, "this model has no tokenizer: send 'prompt' as token ids", chat ? "messages" : "prompt");
                const int32_t bos = int32_t(c.bos_token_id);
                if (chat) {
                    prompt = chat_prompt(*tok, r.messages, bos);
                    for (std::string &stop : chat_stop_strings(*tok)) r.sample.stop_strings.push_back(std::move(stop));
                } else if (!r.prompt_ids.empty()) {
                    prompt = r.prompt_ids;
                } else {
                    prompt = tok->encode(r.prompt_text);
                    if (bos >= 0) prompt.insert(prompt.begin(), bos);
                }
                for (int32_t t : engine_.default_stop_tokens()) r.sample.stop_tokens.push_back(t);
            } catch (const ApiError &e) {
                send_error(res, e);
                return;
            } catch (const Error &e) {
                send_error(res, ApiError(400, e.what(), chat ? "messages" : "prompt"));
                return;
            }
            auto ch = std::make_shared<Channel>();
            uint64_t id = 0;
            try {
                id = engine_.submit(
                    prompt, r.sample, [ch](int32_t, const std::string &text) { if (!text.empty()) ch->push(text); },
                    [ch](const Completion &done) { ch->finish(done); });
            } catch (const Error &e) {
                send_error(res, ApiError(400, e.what(), chat ? "messages" : "prompt"));
                return;
            }
            const std::string rid = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(++g_request_counter);
            const int64_t created = unix_now();
            if (!r.stream) {
                std::unique_lock lock(ch->mu);
                ch->cv.wait(lock, [&] { return ch->done.has_value(); });
                if (ch->done->finish_reason == "error") {
                    send_error(res, ApiError(500, "generation failed: " + ch->done->error, "", "server_error"));
                    return;
                }
                res.set_content(completion_response(r, rid, created, opts_.model_name, *ch->done).dump(),
                                "application/json");
                return;
            }
            res.set_header("Cache-Control", "no-cache");
            auto first = std::make_shared<bool>(true);
            res.set_chunked_content_provider(
                "text/event-stream",
                [this, ch, r, rid, created, id, first](size_t, httplib::DataSink &sink) {
                    auto send = [&](const json &j) {
                        const std::string line = "data: " + j.dump() + "\n\n";
                        return sink.write(line.data(), line.size());
                    };
                    if (*first && r.chat) { // OpenAI opens a chat stream with the role
                        json j = stream_chunk(r, rid, created, opts_.model_name, "", nullptr);
                        j["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
                        if (!send(j)) return engine_.cancel(id), false;
                    }
                    *first = false;
                    std::unique_lock lock(ch->mu);
                    ch->cv.wait(lock, [&] { return !ch->deltas.empty() || ch->done.has_value(); });
                    std::deque<std::string> deltas;
                    deltas.swap(ch->deltas);
                    const std::optional<Completion> done = ch->done;
                    lock.unlock();
                    for (const std::string &d : deltas)
                        if (!send(stream_chunk(r, rid, created, opts_.model_name, d, nullptr)))
                            return engine_.cancel(id), false; // the client went away: stop generating
                    if (done && done->finish_reason == "error") {
                        send(ApiError(500, "generation failed: " + done->error, "", "server_error").body());
                        sink.done();
                    } else if (done) {
                        send(stream_chunk(r, rid, created, opts_.model_name, "", &*done));
                        const std::string end = "data: [DONE]\n\n";
                        sink.write(end.data(), end.size());
                        sink.done();
                    }
                    return true;
                });
        };
    };
    s.Post("/v1/completions", generate(false));
    s.Post("/v1/chat/completions", generate(true));
}

} // namespace zaya
