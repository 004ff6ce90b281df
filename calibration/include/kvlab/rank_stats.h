// Rank statistics for comparing a cheap channel score with measured sensitivity.
#pragma once
#include <cstdint>
#include <vector>

namespace kvlab {

// Ranks 1..n, ties sharing their average rank.
std::vector<double> average_ranks(const std::vector<double>& x);

// Spearman's rho: Pearson correlation of the average ranks. NaN when either side is constant
// (no ordering to compare) or n < 2. Throws std::invalid_argument if the sizes differ.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

// Indices of the k largest values, ties to the lower index, in descending order of value.
std::vector<int64_t> top_k(const std::vector<double>& x, int64_t k);

// |top_k(a) & top_k(b)| / k; NaN when k == 0. Throws for k < 0, k > n, or sizes that differ.
double top_k_recall(const std::vector<double>& truth, const std::vector<double>& guess, int64_t k);

}  // namespace kvlab
