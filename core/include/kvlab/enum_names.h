// Enum <-> name tables: one table per enum generates to_string, parsing and the "choose one
// of: ..." lists, so names, order and error messages cannot drift apart.
#pragma once
#include <optional>
#include <stdexcept>
#include <string>

namespace kvlab {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// Specialize with `static constexpr EnumName<E> names[] = {...};` next to the enum.
template <class E>
struct EnumNames;

template <class E>
const char* enum_name(E value) {
  for (const auto& n : EnumNames<E>::names)
    if (n.value == value) return n.name;
  return "?";
}

// "a, b, c": the valid names in table order.
template <class E>
std::string enum_choices() {
  std::string out;
  for (const auto& n : EnumNames<E>::names) out += (out.empty() ? "" : ", ") + std::string(n.name);
  return out;
}

// The enumerator named `text`, or nothing: for callers that word their own error.
template <class E>
std::optional<E> find_enum(const std::string& text) {
  for (const auto& n : EnumNames<E>::names)
    if (text == n.name) return n.value;
  return std::nullopt;
}

// The enumerator named `text`; otherwise std::invalid_argument naming `key` and the choices.
template <class E>
E parse_enum(const std::string& text, const std::string& key) {
  for (const auto& n : EnumNames<E>::names)
    if (text == n.name) return n.value;
  throw std::invalid_argument(key + "='" + text + "' is not valid; choose one of: " + enum_choices<E>());
}

}  // namespace kvlab
