// Small helpers for `key=value,...` spec strings (quantizer and method specs).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvlab::text {

// Split "a=1,b=2" into pairs; throws std::invalid_argument naming `what` on a malformed item or
// a key given twice (`bits=2,bits=4` would otherwise keep one silently).
std::vector<std::pair<std::string, std::string>> split_pairs(const std::string& s, const std::string& what);
// Strict number parsing: the whole string must be a number; errors name the key.
int parse_int(const std::string& v, const std::string& key);
double parse_double(const std::string& v, const std::string& key);
// A whole non-negative integer (counts, layers, sizes); the error names `key` and says why.
int64_t parse_count(const std::string& v, const std::string& key);
// Shortest decimal that reads back to the same double.
std::string format_double(double v);
// Pick `v` among `choices`, else throw naming the key and listing the choices.
int choose(const std::string& v, const std::string& key, const std::vector<std::string>& choices);

}  // namespace kvlab::text
