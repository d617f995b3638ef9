// OnigRegex (data/onig_regex.h) over Oniguruma's C API.
#include "data/onig_regex.h"

#include "core/error.h"
#include "core/utf8.h"

#include <oniguruma.h>

#include <mutex>

namespace zaya {

struct OnigRegex::Regex {
    regex_t *re = nullptr;
};

namespace {

std::string onig_message(int code, OnigErrorInfo *info) {
    OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
    const int n = info ? onig_error_code_to_str(buf, code, info) : onig_error_code_to_str(buf, code);
    return std::string(reinterpret_cast<const char *>(buf), size_t(std::max(n, 0)));
}

void initialise_onig() {
    static std::once_flag once;
    std::call_once(once, [] {
        OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
        onig_initialize(encodings, 1);
    });
}

} // namespace

OnigRegex::OnigRegex(const std::string &pattern, const std::string &where) : re_(std::make_unique<Regex>()) {
    initialise_onig();
    OnigErrorInfo info{};
    const auto *p = reinterpret_cast<const OnigUChar *>(pattern.data());
    // tokenizers builds its patterns with the onig crate's Regex::new: no options, Oniguruma's own default syntax.
    const int rc = onig_new(&re_->re, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                            ONIG_SYNTAX_ONIGURUMA, &info);
    if (rc != ONIG_NORMAL) fail("{}: the regular expression '{}' does not compile: {}", where, pattern,
                                onig_message(rc, &info));
}

OnigRegex::~OnigRegex() {
    if (re_ && re_->re) onig_free(re_->re);
}

std::vector<std::pair<size_t, size_t>> OnigRegex::find_all(std::string_view text) const {
    std::vector<std::pair<size_t, size_t>> out;
    OnigRegion *region = onig_region_new();
    const auto *begin = reinterpret_cast<const OnigUChar *>(text.data());
    const OnigUChar *end = begin + text.size();
    size_t from = 0;
    bool matched_before = false;
    size_t last_match_end = 0;
    while (from <= text.size()) {
        onig_region_clear(region);
        const int rc = onig_search(re_->re, begin, end, begin + from, end, region, ONIG_OPTION_NONE);
        if (rc == ONIG_MISMATCH) break;
        if (rc < 0) {
            const std::string msg = onig_message(rc, nullptr);
            onig_region_free(region, 1);
            fail("regular expression search failed: {}", msg);
        }
        const size_t s = size_t(region->beg[0]), e = size_t(region->end[0]);
        if (s == e && matched_before && last_match_end == e) { // an empty match where the last one ended
            from += from < text.size() ? utf8_length(uint8_t(text[from])) : 1;
            continue;
        }
        out.emplace_back(s, e);
        from = e, last_match_end = e, matched_before = true;
    }
    onig_region_free(region, 1);
    return out;
}

} // namespace zaya
