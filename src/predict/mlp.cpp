// The predictor MLP: forward, soft cross-entropy with its backward pass, initialization, Adam.
#include "predict/mlp.h"

#include <algorithm>
#include <cmath>

#include "chronos/error.h"
#include "chronos/ops.h"

namespace chronos::predict {
namespace {

// f32 goes through the vectorized ops; f64 (the gradient check) through plain loops.
inline float dot(const float* a, const float* b, int64_t n) { return ops::dot(a, b, n); }
inline double dot(const double* a, const double* b, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}
inline void axpy(float* y, float alpha, const float* x, int64_t n) { ops::axpy(y, alpha, x, n); }
inline void axpy(double* y, double alpha, const double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

template <typename T>
T sigmoid(T z) {
  return T(1) / (T(1) + std::exp(-z));
}

// Logits into work.out; returns the masked soft cross-entropy sum when target is given, and
// leaves the probabilities in work.out.
template <typename T>
double forward_impl(const Mlp<T>& net, const T* x, int64_t n, MlpWork<T>& w, const T* target, const uint8_t* mask) {
  w.reserve(net, n);
  const int64_t n_in = net.n_in, n_hidden = net.n_hidden, n_out = net.n_out, group = net.group;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n_in; ++j)
      w.x_norm[size_t(i * n_in + j)] = (x[i * n_in + j] - net.in_mean[size_t(j)]) * net.in_scale[size_t(j)];
  // Weight row outer, examples inner: a weight row stays in L1 across the examples.
  const T* w1 = net.w1();
  const T* b1 = net.b1();
  for (int64_t r = 0; r < n_hidden; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const T z = b1[r] + dot(w.x_norm.data() + i * n_in, w1 + r * n_in, n_in);
      w.pre[size_t(i * n_hidden + r)] = z;
      w.act[size_t(i * n_hidden + r)] = z * sigmoid(z);
    }
  const T* w2 = net.w2();
  const T* b2 = net.b2();
  for (int64_t o = 0; o < n_out; ++o)
    for (int64_t i = 0; i < n; ++i)
      w.out[size_t(i * n_out + o)] = b2[o] + dot(w.act.data() + i * n_hidden, w2 + o * n_hidden, n_hidden);

  double loss = 0;
  const int64_t n_groups = net.n_groups();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < n_groups; ++g) {
      T* z = w.out.data() + i * n_out + g * group;
      const T max = *std::max_element(z, z + group);
      T sum = 0;
      for (int64_t e = 0; e < group; ++e) sum += std::exp(z[e] - max);
      const T log_sum = std::log(sum);
      if (target != nullptr && (mask == nullptr || mask[i * n_groups + g] != 0)) {
        const T* p = target + i * n_out + g * group;
        for (int64_t e = 0; e < group; ++e)
          if (p[e] != 0) loss -= double(p[e]) * double(z[e] - max - log_sum);
      }
      for (int64_t e = 0; e < group; ++e) z[e] = std::exp(z[e] - max - log_sum);
    }
  return loss;
}

}  // namespace

template <typename T>
Mlp<T>::Mlp(int64_t in, int64_t hidden, int64_t out, int64_t group_size)
    : n_in(in), n_hidden(hidden), n_out(out), group(group_size) {
  CHRONOS_CHECK(in > 0 && hidden > 0 && group_size > 0 && out > 0 && out % group_size == 0);
  in_mean.assign(size_t(in), T(0));
  in_scale.assign(size_t(in), T(1));
  params.assign(size_t(n_params()), T(0));
}

template <typename T>
double Mlp<T>::forward_flops() const {
  return 2.0 * double(n_hidden * n_in + n_out * n_hidden) + 2.0 * double(n_in) + 5.0 * double(n_hidden) +
         4.0 * double(n_out);
}

template <typename T>
void Mlp<T>::init(uint64_t seed) {
  SplitMix64 rng(seed);
  const auto fill = [&](int64_t begin, int64_t count, int64_t fan_in) {
    const double bound = 1.0 / std::sqrt(double(fan_in));
    for (int64_t i = begin; i < begin + count; ++i) params[size_t(i)] = T((2.0 * rng.uniform() - 1.0) * bound);
  };
  fill(w1_offset(), n_hidden * n_in, n_in);
  fill(b1_offset(), n_hidden, n_in);
  fill(w2_offset(), n_out * n_hidden, n_hidden);
  fill(b2_offset(), n_out, n_hidden);
}

template <typename T>
void MlpWork<T>::reserve(const Mlp<T>& net, int64_t n) {
  const auto grow = [](std::vector<T>& v, int64_t size) {
    if (std::ssize(v) < size) v.resize(static_cast<size_t>(size));
  };
  grow(x_norm, n * net.n_in);
  grow(pre, n * net.n_hidden);
  grow(act, n * net.n_hidden);
  grow(out, n * net.n_out);
  grow(d_out, n * net.n_out);
  grow(d_act, n * net.n_hidden);
}

template <typename T>
void mlp_forward(const Mlp<T>& net, const T* x, int64_t n, MlpWork<T>& work) {
  forward_impl(net, x, n, work, static_cast<const T*>(nullptr), nullptr);
}

template <typename T>
double mlp_loss(const Mlp<T>& net, const T* x, const T* target, const uint8_t* mask, int64_t n, MlpWork<T>& work) {
  return forward_impl(net, x, n, work, target, mask);
}

template <typename T>
double mlp_loss_and_grad(const Mlp<T>& net, const T* x, const T* target, const uint8_t* mask, int64_t n, MlpWork<T>& w,
                         T* grad) {
  const double loss = forward_impl(net, x, n, w, target, mask);
  const int64_t n_in = net.n_in, n_hidden = net.n_hidden, n_out = net.n_out, group = net.group;
  const int64_t n_groups = net.n_groups();
  // dCE/dz_e = q_e * sum(p) - p_e for a softmax over logits z.
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < n_groups; ++g) {
      T* d = w.d_out.data() + i * n_out + g * group;
      if (mask != nullptr && mask[i * n_groups + g] == 0) {
        std::fill(d, d + group, T(0));
        continue;
      }
      const T* q = w.out.data() + i * n_out + g * group;
      const T* p = target + i * n_out + g * group;
      T p_sum = 0;
      for (int64_t e = 0; e < group; ++e) p_sum += p[e];
      for (int64_t e = 0; e < group; ++e) d[e] = q[e] * p_sum - p[e];
    }
  T* g_w1 = grad + net.w1_offset();
  T* g_b1 = grad + net.b1_offset();
  T* g_w2 = grad + net.w2_offset();
  T* g_b2 = grad + net.b2_offset();
  const T* w2 = net.w2();
  std::fill(w.d_act.begin(), w.d_act.begin() + n * n_hidden, T(0));
  for (int64_t o = 0; o < n_out; ++o)
    for (int64_t i = 0; i < n; ++i) {
      const T d = w.d_out[size_t(i * n_out + o)];
      if (d == 0) continue;
      g_b2[o] += d;
      axpy(g_w2 + o * n_hidden, d, w.act.data() + i * n_hidden, n_hidden);
      axpy(w.d_act.data() + i * n_hidden, d, w2 + o * n_hidden, n_hidden);
    }
  // silu'(z) = s + z s (1 - s); d_act becomes d_pre in place.
  for (int64_t j = 0; j < n * n_hidden; ++j) {
    const T z = w.pre[size_t(j)];
    const T s = sigmoid(z);
    w.d_act[size_t(j)] *= s + z * s * (T(1) - s);
  }
  for (int64_t r = 0; r < n_hidden; ++r)
    for (int64_t i = 0; i < n; ++i) {
      const T d = w.d_act[size_t(i * n_hidden + r)];
      if (d == 0) continue;
      g_b1[r] += d;
      axpy(g_w1 + r * n_in, d, w.x_norm.data() + i * n_in, n_in);
    }
  return loss;
}

void Adam::begin_step(int64_t n_params) {
  if (std::ssize(m) != n_params) {
    m.assign(size_t(n_params), 0.0f);
    v.assign(size_t(n_params), 0.0f);
    step = 0;
  }
  ++step;
}

void Adam::update(float* params, const float* grad, int64_t begin, int64_t end) {
  const float correction1 = 1.0f - float(std::pow(double(beta1), double(step)));
  const float correction2 = 1.0f - float(std::pow(double(beta2), double(step)));
  for (int64_t i = begin; i < end; ++i) {
    const float g = grad[i];
    m[size_t(i)] = beta1 * m[size_t(i)] + (1.0f - beta1) * g;
    v[size_t(i)] = beta2 * v[size_t(i)] + (1.0f - beta2) * g * g;
    const float m_hat = m[size_t(i)] / correction1;
    const float v_hat = v[size_t(i)] / correction2;
    params[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
  }
}

template struct Mlp<float>;
template struct Mlp<double>;
template struct MlpWork<float>;
template struct MlpWork<double>;
template void mlp_forward(const Mlp<float>&, const float*, int64_t, MlpWork<float>&);
template void mlp_forward(const Mlp<double>&, const double*, int64_t, MlpWork<double>&);
template double mlp_loss(const Mlp<float>&, const float*, const float*, const uint8_t*, int64_t, MlpWork<float>&);
template double mlp_loss(const Mlp<double>&, const double*, const double*, const uint8_t*, int64_t, MlpWork<double>&);
template double mlp_loss_and_grad(const Mlp<float>&, const float*, const float*, const uint8_t*, int64_t,
                                  MlpWork<float>&, float*);
template double mlp_loss_and_grad(const Mlp<double>&, const double*, const double*, const uint8_t*, int64_t,
                                  MlpWork<double>&, double*);

}  // namespace chronos::predict
