// A Jinja2 subset for Hugging Face chat templates: renders as transformers does (jinja2 3.1's
// ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks, loopcontrols and the {% generation %} tag, plus its
// tojson, raise_exception, strftime_now, dict and namespace), so that prompts match the model's own format byte for
// byte. The semantics follow jinja2's source; what is left out is listed in jinja_render.cpp.
#pragma once
#include <nlohmann/json.hpp>

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zaya::jinja {

struct Program;

class Template {
  public:
    // Parses `source`; `name` starts every error message ("chat_template.jinja:12:5: unexpected 'endfor'").
    // Throws zaya::Error on a syntax error or an unknown filter or test.
    Template(std::string_view source, std::string name);
    // Renders with each member of `context` (an object) as a variable. `generation` (when given) receives the
    // [begin, end) byte offsets in the output of each {% generation %} block's text, as transformers'
    // AssistantTracker records them for assistant masks. `now` is what strftime_now formats (local time).
    // Throws zaya::Error on a runtime error ("chat_template.jinja:30: ...") or with raise_exception's message
    // ("chat_template.jinja: raise_exception: Conversation roles must alternate").
    std::string render(const nlohmann::ordered_json &context,
                       std::vector<std::pair<size_t, size_t>> *generation = nullptr,
                       std::time_t now = std::time(nullptr)) const;

  private:
    // Immutable once parsed: copies share it, and render() only reads it (thread-safe).
    std::shared_ptr<const Program> program_;
};

} // namespace zaya::jinja
