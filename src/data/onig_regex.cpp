// OnigRegex (data/onig_regex.h) over Oniguruma's C API, loaded with dlopen(RTLD_LOCAL): libonig also exports a
// POSIX API under glibc's names (regcomp, regexec, ...), which, linked, would take over every POSIX regex in the
// process (gtest's death-test matchers; under ASan onig's regcomp met glibc's regexec through the interceptor and
// deadlocked). Loaded locally, its symbols are reachable through dlsym alone.
#include "data/onig_regex.h"

#include "core/error.h"
#include "core/utf8.h"

#define ONIG_ESCAPE_REGEX_T_COLLISION // no regex_t of onig's beside glibc's (unity builds)
#include <oniguruma.h>

#include <dlfcn.h>

#include <algorithm>
#include <type_traits>

namespace zaya {

namespace {

// The few entry points OnigRegex uses, and the two objects behind ONIG_ENCODING_UTF8 and ONIG_SYNTAX_ONIGURUMA.
struct OnigApi {
    int (*initialize)(OnigEncoding *encodings, int n);
    int (*compile)(::OnigRegex *, const OnigUChar *, const OnigUChar *, OnigOptionType, OnigEncoding,
                   OnigSyntaxType *, OnigErrorInfo *);
    void (*free_regex)(::OnigRegex);
    int (*search)(::OnigRegex, const OnigUChar *, const OnigUChar *, const OnigUChar *, const OnigUChar *,
                  OnigRegion *, OnigOptionType);
    OnigRegion *(*region_new)();
    void (*region_free)(OnigRegion *, int);
    void (*region_clear)(OnigRegion *);
    int (*error_code_to_str)(OnigUChar *, int, ...);
    OnigEncoding utf8;
    OnigSyntaxType *syntax;

    OnigApi() {
        void *lib = dlopen("libonig.so.5", RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            fail("tokenizer.json patterns need Oniguruma (libonig.so.5), which did not load: {} (scripts/setup.sh "
                 "installs it: libonig-dev)",
                 dlerror());
        auto sym = [&](auto &fn, const char *name) {
            void *p = dlsym(lib, name);
            if (!p) fail("libonig.so.5 has no {}: {}", name, dlerror());
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
        };
        sym(initialize, "onig_initialize");
        sym(compile, "onig_new");
        sym(free_regex, "onig_free");
        sym(search, "onig_search");
        sym(region_new, "onig_region_new");
        sym(region_free, "onig_region_free");
        sym(region_clear, "onig_region_clear");
        sym(error_code_to_str, "onig_error_code_to_str");
        sym(utf8, "OnigEncodingUTF8");
        sym(syntax, "OnigSyntaxOniguruma");
        OnigEncoding encodings[] = {utf8};
        initialize(encodings, 1);
    }
};

const OnigApi &onig() {
    static const OnigApi api; // thread-safe once
    return api;
}

std::string onig_message(int code, OnigErrorInfo *info) {
    OnigUChar buf[ONIG_MAX_ERROR_MESSAGE_LEN];
    const int n = info ? onig().error_code_to_str(buf, code, info) : onig().error_code_to_str(buf, code);
    return std::string(reinterpret_cast<const char *>(buf), size_t(std::max(n, 0)));
}

} // namespace

struct OnigRegex::Regex {
    ::OnigRegex re = nullptr;
};

OnigRegex::OnigRegex(const std::string &pattern, const std::string &where) : re_(std::make_unique<Regex>()) {
    const OnigApi &api = onig();
    OnigErrorInfo info{};
    const auto *p = reinterpret_cast<const OnigUChar *>(pattern.data());
    // tokenizers builds its patterns with the onig crate's Regex::new: no options, Oniguruma's own default syntax.
    const int rc = api.compile(&re_->re, p, p + pattern.size(), ONIG_OPTION_NONE, api.utf8, api.syntax, &info);
    if (rc != ONIG_NORMAL)
        fail("{}: the regular expression '{}' does not compile: {}", where, pattern, onig_message(rc, &info));
}

OnigRegex::~OnigRegex() {
    if (re_ && re_->re) onig().free_regex(re_->re);
}

std::vector<std::pair<size_t, size_t>> OnigRegex::find_all(std::string_view text) const {
    const OnigApi &api = onig();
    std::vector<std::pair<size_t, size_t>> out;
    OnigRegion *region = api.region_new();
    const auto *begin = reinterpret_cast<const OnigUChar *>(text.data());
    const OnigUChar *end = begin + text.size();
    size_t from = 0;
    bool matched_before = false;
    size_t last_match_end = 0;
    while (from <= text.size()) {
        api.region_clear(region);
        const int rc = api.search(re_->re, begin, end, begin + from, end, region, ONIG_OPTION_NONE);
        if (rc == ONIG_MISMATCH) break;
        if (rc < 0) {
            const std::string msg = onig_message(rc, nullptr);
            api.region_free(region, 1);
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
    api.region_free(region, 1);
    return out;
}

} // namespace zaya
