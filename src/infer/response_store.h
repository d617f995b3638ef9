// Stored responses for the Responses API (`store`, `previous_response_id`, GET and DELETE /v1/responses/{id}): each
// finished Response with the conversation it ends (chat messages: its input's and the earlier responses' turns,
// then its answer; not its instructions, which OpenAI does not carry over) and its input items, in memory, the
// oldest dropped once they hold more than a byte budget. Lost when the server stops. Thread-safe.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace zaya {

class ResponseStore {
  public:
    struct Entry {
        nlohmann::json response;             // the Response object, as answered
        nlohmann::ordered_json conversation; // chat messages through its answer
        nlohmann::json input_items;          // what GET .../input_items lists (responses_api.h: listed_input_items)
    };
    explicit ResponseStore(size_t max_bytes) : max_bytes_(max_bytes) {}

    bool enabled() const { return max_bytes_ > 0; }
    // Keeps an entry (if it fits the budget at all), dropping the oldest ones beyond it.
    void put(const std::string &id, Entry e);
    std::optional<Entry> get(const std::string &id) const;
    bool erase(const std::string &id);
    size_t bytes() const;

  private:
    struct Kept {
        Entry entry;
        size_t bytes = 0;
        uint64_t serial = 0; // when it was put: order_ may still name an id put again since
    };
    void drop(std::map<std::string, Kept>::iterator it);
    mutable std::mutex mu_;
    size_t max_bytes_, bytes_ = 0;
    uint64_t serial_ = 0;
    std::map<std::string, Kept> entries_;
    std::deque<std::pair<uint64_t, std::string>> order_; // (serial, id), oldest first; stale pairs skipped
};

} // namespace zaya
