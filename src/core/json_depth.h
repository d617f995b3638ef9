// How deeply a parsed JSON value nests, measured without recursion. nlohmann::json parses and destroys any depth
// iteratively, but copies and dumps recursively: a request body of a million '[' parses, then overflows the stack
// when a part of it is copied. Untrusted JSON (a request, a schema file) is measured first and refused when deeper
// than anything legitimate.
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

namespace zaya {

// Whether j nests more than `limit` containers deep (a scalar: 0, [] or {}: 1, [[1]]: 2).
template <class Json> bool json_deeper_than(const Json &j, size_t limit) {
    std::vector<std::pair<const Json *, size_t>> todo = {{&j, 0}};
    while (!todo.empty()) {
        const auto [v, depth] = todo.back();
        todo.pop_back();
        if (!v->is_structured()) continue;
        if (depth + 1 > limit) return true;
        for (const Json &child : *v) todo.emplace_back(&child, depth + 1);
    }
    return false;
}

} // namespace zaya
