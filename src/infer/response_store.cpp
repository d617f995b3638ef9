#include "infer/response_store.h"

namespace zaya {

void ResponseStore::drop(std::map<std::string, Kept>::iterator it) {
    bytes_ -= it->second.bytes;
    entries_.erase(it);
}

void ResponseStore::put(const std::string &id, Entry e) {
    const size_t n = e.response.dump().size() + e.conversation.dump().size() + e.input_items.dump().size();
    if (n > max_bytes_) return;
    std::lock_guard lock(mu_);
    if (const auto old = entries_.find(id); old != entries_.end()) drop(old);
    while (bytes_ + n > max_bytes_ && !order_.empty()) { // the oldest first
        const auto [serial, oldest] = order_.front();
        order_.pop_front();
        if (const auto it = entries_.find(oldest); it != entries_.end() && it->second.serial == serial) drop(it);
    }
    entries_[id] = Kept{std::move(e), n, ++serial_};
    order_.emplace_back(serial_, id);
    bytes_ += n;
    if (order_.size() > 2 * entries_.size() + 64) // stale pairs of erased or replaced entries: kept few
        std::erase_if(order_, [&](const auto &p) {
            const auto it = entries_.find(p.second);
            return it == entries_.end() || it->second.serial != p.first;
        });
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string &id) const {
    std::lock_guard lock(mu_);
    const auto it = entries_.find(id);
    if (it == entries_.end()) return std::nullopt;
    return it->second.entry;
}

bool ResponseStore::erase(const std::string &id) {
    std::lock_guard lock(mu_);
    const auto it = entries_.find(id);
    if (it == entries_.end()) return false;
    drop(it);
    return true;
}

size_t ResponseStore::bytes() const {
    std::lock_guard lock(mu_);
    return bytes_;
}

} // namespace zaya
