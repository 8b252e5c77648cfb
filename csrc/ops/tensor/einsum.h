// Einsum's equation, parsed once for the shape rule (einsum.cc) and the CPU
// kernel (backends/cpu/einsum.cc): the labels of every operand axis and of
// the output. Ellipsis dims broadcast numpy-style (aligned from the right).
// Without "->" the output is the labels used once, in ASCII order, after the
// ellipsis dims. Ctx is InferContext or KernelBuildInfo (for fail()).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "ops/elementwise/typeset.h"

namespace twinfer::tensor {

inline constexpr unsigned kEinsumTypes = ew::kFloatTypes | ew::kI32 | ew::kI64 | ew::kU32 | ew::kU64;
inline constexpr int kEllipsisBase = 52;  // label ids: a-z 26..51, A-Z 0..25, ellipsis dims from 52

struct EinsumSpec {
  std::vector<std::vector<int>> in;  // labels per operand axis
  std::vector<int> out;
  int num_labels = 0;
};

inline int letter_id(char ch) {
  return ch >= 'a' && ch <= 'z' ? 26 + (ch - 'a') : (ch >= 'A' && ch <= 'Z' ? ch - 'A' : -1);
}

template <typename Ctx>
EinsumSpec parse_einsum(const Ctx& c, const std::string& eq_in, const std::vector<size_t>& ranks) {
  std::string eq;
  for (char ch : eq_in)
    if (ch != ' ') eq += ch;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t b = 0;;) {
    const size_t e = lhs.find(',', b);
    terms.push_back(lhs.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  if (terms.size() != ranks.size())
    c.fail(ErrorKind::kInvalidArgument, "equation '" + eq_in + "' has " + std::to_string(terms.size()) +
                                            " operands, the node " + std::to_string(ranks.size()));
  // Parses one term into letter ids with -1 marking the ellipsis.
  auto parse_term = [&](const std::string& t) {
    std::vector<int> ids;
    bool ell = false;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t.compare(i, 3, "...") == 0) {
        if (ell) c.fail(ErrorKind::kInvalidArgument, "equation '" + eq_in + "' has two ellipses in one term");
        ell = true;
        ids.push_back(-1);
        i += 2;
        continue;
      }
      const int id = letter_id(t[i]);
      if (id < 0) c.fail(ErrorKind::kInvalidArgument, "equation '" + eq_in + "' has a bad character '" + t[i] + "'");
      ids.push_back(id);
    }
    return ids;
  };
  EinsumSpec s;
  int ell_rank = 0;
  std::vector<std::vector<int>> raw;
  for (size_t k = 0; k < terms.size(); ++k) {
    raw.push_back(parse_term(terms[k]));
    const bool has_ell = std::count(raw[k].begin(), raw[k].end(), -1) > 0;
    const int letters = static_cast<int>(raw[k].size()) - (has_ell ? 1 : 0);
    const int r = static_cast<int>(ranks[k]);
    if (has_ell ? r < letters : r != letters)
      c.fail(ErrorKind::kShape, "term '" + terms[k] + "' of '" + eq_in + "' does not match operand " +
                                    std::to_string(k) + " of rank " + std::to_string(r));
    if (has_ell) ell_rank = std::max(ell_rank, r - letters);
  }
  for (size_t k = 0; k < terms.size(); ++k) {
    std::vector<int> labels;
    const int letters = static_cast<int>(std::count_if(raw[k].begin(), raw[k].end(), [](int v) { return v >= 0; }));
    for (int id : raw[k]) {
      if (id >= 0) {
        labels.push_back(id);
      } else {
        const int e = static_cast<int>(ranks[k]) - letters;
        for (int j = 0; j < e; ++j) labels.push_back(kEllipsisBase + ell_rank - e + j);
      }
    }
    s.in.push_back(labels);
  }
  s.num_labels = kEllipsisBase + ell_rank;
  if (arrow != std::string::npos) {
    for (int id : parse_term(eq.substr(arrow + 2))) {
      if (id >= 0) {
        bool used = false;
        for (const auto& l : s.in) used = used || std::count(l.begin(), l.end(), id) > 0;
        if (!used) c.fail(ErrorKind::kInvalidArgument, "output label of '" + eq_in + "' appears in no operand");
        if (std::count(s.out.begin(), s.out.end(), id))
          c.fail(ErrorKind::kInvalidArgument, "output of '" + eq_in + "' repeats a label");
        s.out.push_back(id);
      } else {
        for (int j = 0; j < ell_rank; ++j) s.out.push_back(kEllipsisBase + j);
      }
    }
  } else {
    for (int j = 0; j < ell_rank; ++j) s.out.push_back(kEllipsisBase + j);
    std::vector<int> count(kEllipsisBase, 0);
    for (const auto& l : s.in)
      for (int id : l)
        if (id < kEllipsisBase) ++count[id];
    for (int id = 0; id < kEllipsisBase; ++id)
      if (count[id] == 1) s.out.push_back(id);
  }
  return s;
}

template <typename Ctx>
std::string einsum_equation(const Ctx& c) {
  const std::string eq = c.node().attr_string("equation", "");
  if (eq.empty()) c.fail(ErrorKind::kModelFormat, "attribute 'equation' is missing");
  return eq;
}

}  // namespace twinfer::tensor
