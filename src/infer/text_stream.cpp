#include "infer/text_stream.h"

#include "core/error.h"

#include <algorithm>

namespace zaya {

TextStream::TextStream(const Tokenizer &tok, std::vector<std::string> stop_strings)
    : tok_(tok), stops_(std::move(stop_strings)) {}

namespace {

const std::string kReplacement = "\xEF\xBF\xBD"; // U+FFFD: what decoding gives for an unfinished byte sequence

bool ends_unfinished(const std::string &s) { return s.size() >= 3 && s.compare(s.size() - 3, 3, kReplacement) == 0; }

} // namespace

std::string TextStream::text_so_far() {
    const auto from = [&](size_t i) { return std::vector<int32_t>(ids_.begin() + std::ptrdiff_t(i), ids_.end()); };
    const std::string window = tok_.decode(from(prefix_));
    // Where the new ids begin with byte pieces that continue the context's run, a tokenizer.json's ByteFallback
    // judges the run whole, and the context's finished characters read U+FFFD until the new one is finished: then
    // the new ids are decoded alone (their first is a byte piece, which no first-token rule touches). The text
    // stays that of each character as it finishes, which is decoding all the ids' text whenever that has no U+FFFD.
    const std::string fresh =
        window.compare(0, context_.size(), context_) == 0 ? window.substr(context_.size()) : tok_.decode(from(read_));
    std::string full = settled_ + fresh;
    if (!ends_unfinished(full)) {
        settled_ = full;
        // The settled ids become the next window's context, unless they have no text of their own (control tokens;
        // a lone space a first-token rule drops): the first-token rule would then fall on the next new id. The
        // context then grows instead: the window keeps its start, and its whole text so far was settled.
        if (std::string chunk = tok_.decode(from(read_)); !chunk.empty()) {
            prefix_ = read_;
            context_ = std::move(chunk);
        } else {
            context_ = window;
        }
        read_ = ids_.size();
    }
    return full;
}

std::string TextStream::push(int32_t id) {
    if (stopped_) return {};
    // A model's vocabulary may be padded past its tokenizer's (ZAYA1: 262272 vs Gemma3's 262144): such ids have
    // no text.
    if (id < 0 || id >= tok_.vocab_size()) return {};
    ids_.push_back(id);
    const std::string full = text_so_far();
    const size_t from = std::min(released_.size(), full.size());
    // A stop string anywhere in the text not yet released (it may straddle the boundary).
    size_t stop_at = std::string::npos;
    for (const std::string &s : stops_) {
        const size_t start = from >= s.size() ? from - (s.size() - 1) : 0;
        const size_t p = full.find(s, start);
        if (p != std::string::npos) stop_at = std::min(stop_at, p);
    }
    if (stop_at != std::string::npos) {
        stopped_ = true;
        std::string out = stop_at > from ? full.substr(from, stop_at - from) : std::string();
        released_ += out;
        return out;
    }
    size_t end = full.size();
    while (end >= from + 3 && full.compare(end - 3, 3, kReplacement) == 0) end -= 3;
    // The longest tail that is a proper prefix of a stop string waits for the next token.
    size_t hold = 0;
    for (const std::string &s : stops_)
        for (size_t k = std::min(s.size() - 1, end - from); k > hold; --k)
            if (full.compare(end - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
    end -= hold;
    std::string out = end > from ? full.substr(from, end - from) : std::string();
    released_ += out;
    return out;
}

std::string TextStream::flush() {
    if (stopped_) return {};
    const std::string full = text_so_far();
    std::string out = full.size() > released_.size() ? full.substr(released_.size()) : std::string();
    released_ += out;
    return out;
}

} // namespace zaya
