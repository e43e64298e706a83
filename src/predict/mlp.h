// The predictors' network: a two-layer SiLU MLP with a softmax per group of outputs, its soft
// cross-entropy loss with a hand-written backward pass, Adam, and the seeded RNG they use.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace chronos::predict {

// splitmix64: a seeded generator whose sequence is the same on every platform (unlike the
// distributions of <random>), so saved predictors are reproducible byte for byte.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint64_t below(uint64_t n) { return uint64_t(uniform() * double(n)); }

 private:
  uint64_t state_;
};

// Fisher-Yates with SplitMix64 (std::shuffle's algorithm is implementation-defined).
template <typename Index>
void seeded_shuffle(std::vector<Index>& items, SplitMix64& rng) {
  for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[size_t(rng.below(i))]);
}

// x_n = (x - in_mean) * in_scale  ->  fc1 -> SiLU -> fc2 -> softmax over each group of `group`
// outputs. The input normalization is fixed from the training data, not trained. The trainable
// parameters live in one flat vector (fc1.weight, fc1.bias, fc2.weight, fc2.bias) so that
// gradients reduce and Adam steps over a single array.
template <typename T>
struct Mlp {
  int64_t n_in = 0, n_hidden = 0, n_out = 0, group = 0;  // n_out is a multiple of group
  std::vector<T> in_mean;                                // [n_in]
  std::vector<T> in_scale;                               // [n_in]
  std::vector<T> params;                                 // [n_params()]

  Mlp() = default;
  Mlp(int64_t in, int64_t hidden, int64_t out, int64_t group_size);

  int64_t n_groups() const { return n_out / group; }
  int64_t n_params() const { return n_hidden * n_in + n_hidden + n_out * n_hidden + n_out; }
  int64_t w1_offset() const { return 0; }                               // [n_hidden, n_in]
  int64_t b1_offset() const { return n_hidden * n_in; }                 // [n_hidden]
  int64_t w2_offset() const { return b1_offset() + n_hidden; }          // [n_out, n_hidden]
  int64_t b2_offset() const { return w2_offset() + n_out * n_hidden; }  // [n_out]
  const T* w1() const { return params.data() + w1_offset(); }
  const T* b1() const { return params.data() + b1_offset(); }
  const T* w2() const { return params.data() + w2_offset(); }
  const T* b2() const { return params.data() + b2_offset(); }
  // Multiply-adds of one forward pass per example, counted as 2 FLOPs each, plus the
  // element-wise work (normalization, SiLU, softmax) at a few FLOPs per element.
  double forward_flops() const;

  // nn.Linear's default initialization: weights and biases ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  void init(uint64_t seed);
};

// Intermediates of a forward pass over up to `capacity` examples, reused between calls.
template <typename T>
struct MlpWork {
  std::vector<T> x_norm;  // [n, n_in]
  std::vector<T> pre;     // [n, n_hidden] fc1 output before SiLU
  std::vector<T> act;     // [n, n_hidden]
  std::vector<T> out;     // [n, n_out] logits, then probabilities
  std::vector<T> d_out;   // [n, n_out]
  std::vector<T> d_act;   // [n, n_hidden]
  void reserve(const Mlp<T>& net, int64_t n);
};

// probs[n, n_out] (in work.out): softmax per group of the network's output for x[n, n_in].
template <typename T>
void mlp_forward(const Mlp<T>& net, const T* x, int64_t n, MlpWork<T>& work);

// Runs the forward pass, then adds to grad[n_params] the gradient of
//   sum over examples i and groups g with mask[i, g] != 0 of CE(target[i, g, :], probs[i, g, :])
// where CE(p, q) = -sum_e p_e log q_e, and returns that sum. `target` is [n, n_out], each masked-in
// group summing to 1; `mask` is [n, n_groups] or null for "all groups". The caller divides by
// the number of terms.
template <typename T>
double mlp_loss_and_grad(const Mlp<T>& net, const T* x, const T* target, const uint8_t* mask, int64_t n,
                         MlpWork<T>& work, T* grad);

// Same sum without the gradient.
template <typename T>
double mlp_loss(const Mlp<T>& net, const T* x, const T* target, const uint8_t* mask, int64_t n, MlpWork<T>& work);

// Adam (Kingma & Ba) with bias correction, on the flat parameter vector.
struct Adam {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  int64_t step = 0;
  std::vector<float> m, v;
  // params[i] -= lr * m_hat / (sqrt(v_hat) + eps) for i in [begin, end); call begin_step() once
  // per step before the (possibly parallel) update calls.
  void begin_step(int64_t n_params);
  void update(float* params, const float* grad, int64_t begin, int64_t end);
};

}  // namespace chronos::predict
