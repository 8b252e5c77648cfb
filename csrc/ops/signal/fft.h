// A complex FFT of any length in double precision for the CPU DFT and STFT
// kernels (dft.cc), planned once per node (factors, twiddles) and then only
// read, so one plan serves every thread.
//
// Lengths whose prime factors are all small go through a mixed-radix
// decimation in time after KISS FFT's recursion (radix 4 and 2 butterflies
// written out, any other factor by a direct O(p^2) butterfly). A length with
// a large prime factor (> kMaxDirectRadix) would make that butterfly
// O(n^2), so it goes through Bluestein's chirp-z transform instead: a
// circular convolution done with power-of-two FFTs. Every length is
// O(n log n). Double precision keeps the float32 results at least as close
// to the exact transform as onnxruntime's float FFT.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace twinfer::signal {

struct Cpx {
  double re = 0, im = 0;
};

class FftPlan {
 public:
  // inverse: the exponent's sign is +; neither direction scales.
  FftPlan(int64_t n, bool inverse);
  ~FftPlan();
  FftPlan(const FftPlan&) = delete;
  FftPlan& operator=(const FftPlan&) = delete;

  int64_t size() const { return n_; }
  // Values of scratch run() needs.
  size_t scratch_size() const { return scratch_; }
  // out[k] = sum_j in[j] exp(-+2 pi i j k / n) for k in [0, n); in and out
  // are distinct arrays of n values.
  void run(const Cpx* in, Cpx* out, Cpx* scratch) const;

 private:
  void work(Cpx* out, const Cpx* in, int64_t fstride, const int64_t* factors, Cpx* scratch) const;
  void butterfly2(Cpx* out, int64_t fstride, int64_t m) const;
  void butterfly4(Cpx* out, int64_t fstride, int64_t m) const;
  void butterfly_any(Cpx* out, int64_t fstride, int64_t m, int64_t p, Cpx* scratch) const;
  void run_bluestein(const Cpx* in, Cpx* out, Cpx* scratch) const;

  int64_t n_;
  bool inverse_;
  size_t scratch_ = 0;
  std::vector<int64_t> factors_;  // (radix p, length left m) pairs, outermost first
  std::vector<Cpx> tw_;           // exp(-+2 pi i j / n)
  // Bluestein: chirp_[j] = exp(-+pi i j^2 / n); conv_ is the forward FFT of
  // conj(chirp) wrapped around big_ points, divided by big_.
  std::unique_ptr<FftPlan> big_plan_;
  std::vector<Cpx> chirp_, conv_;
};

}  // namespace twinfer::signal
