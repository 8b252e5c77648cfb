#include "core/shape.h"

#include <algorithm>

#include "core/error.h"
#include "core/shape_limits.h"

namespace twinfer {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

bool shape_fits(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) {
    if (d < 0) return false;
    if (d > 0 && n > kMaxElements / d) return false;
    n *= d;
  }
  return true;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

Shape channels_last_strides(const Shape& dims) {
  if (dims.size() < 3) return contiguous_strides(dims);
  Shape st(dims.size());
  int64_t run = dims[1];  // C is innermost: stride 1
  st[1] = 1;
  for (size_t i = dims.size() - 1; i >= 2; --i) st[i] = run, run *= dims[i];
  st[0] = run;
  return st;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

bool sym_shape_known(const SymShape& s) {
  return std::all_of(s.begin(), s.end(), [](const Dim& d) { return d.known(); });
}

Shape sym_shape_values(const SymShape& s) {
  Shape r;
  r.reserve(s.size());
  for (auto& d : s) r.push_back(d.value);
  return r;
}

SymShape sym_shape_from(const Shape& s) { return SymShape(s.begin(), s.end()); }

std::string sym_shape_str(const SymShape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + s[i].str();
  return r + "]";
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape r(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw Error(ErrorKind::kShape,
                  "cannot broadcast shapes " + shape_str(a) + " and " + shape_str(b));
    r[i] = da == 1 ? db : da;
  }
  return r;
}

SymShape broadcast_sym_shapes(const SymShape& a, const SymShape& b) {
  size_t n = std::max(a.size(), b.size());
  SymShape r(n);
  for (size_t i = 0; i < n; ++i) {
    Dim da = i < n - a.size() ? Dim(1) : a[i - (n - a.size())];
    Dim db = i < n - b.size() ? Dim(1) : b[i - (n - b.size())];
    if (da.known() && db.known()) {
      if (da.value != db.value && da.value != 1 && db.value != 1)
        throw Error(ErrorKind::kShape, "cannot broadcast shapes " + sym_shape_str(a) + " and " +
                                           sym_shape_str(b));
      r[i] = Dim(da.value == 1 ? db.value : da.value);
    } else if (da.known() && da.value == 1) {
      r[i] = db;
    } else if (db.known() && db.value == 1) {
      r[i] = da;
    } else if (!da.known() && !db.known() && da == db) {
      r[i] = da;
    } else if (da.known()) {
      r[i] = da;  // the other is unknown but must equal da or be 1
    } else if (db.known()) {
      r[i] = db;
    } else {
      r[i] = Dim();  // two different unknowns
    }
  }
  return r;
}

}  // namespace twinfer
