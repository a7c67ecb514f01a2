#include "mlp.hpp"

#include <algorithm>
#include <cmath>

#include "distcomm/core/reduce.hpp"

namespace train_mlp {
namespace {

// out[o] += a * w[o] for o < n: one row of an input-major weight matrix. The loop runs over
// independent outputs, so it vectorizes without reordering any sum.
void add_scaled(float* out, const float* w, float a, std::size_t n) noexcept {
  for (std::size_t o = 0; o < n; ++o) out[o] += a * w[o];
}

// z = b + x W for an input-major W (inputs x outputs). Inputs that are zero (ReLU) are skipped.
void affine(float* z, const float* w, const float* b, const float* x, std::size_t inputs,
            std::size_t outputs) noexcept {
  std::copy(b, b + outputs, z);
  for (std::size_t i = 0; i < inputs; ++i) {
    if (x[i] != 0.0f) add_scaled(z, w + i * outputs, x[i], outputs);
  }
}

// Gradients of one affine layer for one sample, added into gw and gb; when dx is given it gets
// the delta of the layer's input, masked by the ReLU that produced it (z_in > 0).
void affine_backward(float* gw, float* gb, float* dx, const float* w, const float* x,
                     const float* z_in, const float* dz, std::size_t inputs,
                     std::size_t outputs) noexcept {
  for (std::size_t o = 0; o < outputs; ++o) gb[o] += dz[o];
  for (std::size_t i = 0; i < inputs; ++i) {
    if (x[i] != 0.0f) add_scaled(gw + i * outputs, dz, x[i], outputs);
  }
  if (dx == nullptr) return;
  for (std::size_t i = 0; i < inputs; ++i) {
    float s = 0.0f;
    if (z_in[i] > 0.0f) {
      const float* row = w + i * outputs;
      for (std::size_t o = 0; o < outputs; ++o) s += row[o] * dz[o];
    }
    dx[i] = s;
  }
}

void relu(float* h, const float* z, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) h[i] = z[i] > 0.0f ? z[i] : 0.0f;
}

}  // namespace

std::string mlp_shape::to_string() const {
  return std::to_string(inputs) + "-" + std::to_string(hidden1) + "-" + std::to_string(hidden2) +
         "-" + std::to_string(classes);
}

mlp::mlp(const mlp_shape& shape)
    : shape_(shape),
      z1_(shape.hidden1),
      h1_(shape.hidden1),
      z2_(shape.hidden2),
      h2_(shape.hidden2),
      z3_(shape.classes),
      d1_(shape.hidden1),
      d2_(shape.hidden2),
      d3_(shape.classes) {
  const auto add = [&](const char* name, std::size_t count) {
    tensors_.push_back(tensor_slice{name, parameter_count_, count});
    parameter_count_ += count;
  };
  add("W1", shape.inputs * shape.hidden1);
  add("b1", shape.hidden1);
  add("W2", shape.hidden1 * shape.hidden2);
  add("b2", shape.hidden2);
  add("W3", shape.hidden2 * shape.classes);
  add("b3", shape.classes);
}

void mlp::initialize(float* params, rng& r) const {
  const std::size_t fan_in[] = {shape_.inputs, shape_.hidden1, shape_.hidden2};
  for (std::size_t layer = 0; layer < 3; ++layer) {
    const tensor_slice& w = tensors_[2 * layer];
    const tensor_slice& b = tensors_[2 * layer + 1];
    const double sd = std::sqrt(2.0 / static_cast<double>(fan_in[layer]));
    for (std::size_t k = 0; k < w.count; ++k) {
      params[w.offset + k] = static_cast<float>(sd * r.normal());
    }
    std::fill(params + b.offset, params + b.offset + b.count, 0.0f);
  }
}

double mlp::forward(const float* params, const float* x, std::int32_t label, bool& correct) {
  const mlp_shape& s = shape_;
  const auto p = [&](std::size_t t) { return params + tensors_[t].offset; };
  affine(z1_.data(), p(0), p(1), x, s.inputs, s.hidden1);
  relu(h1_.data(), z1_.data(), s.hidden1);
  affine(z2_.data(), p(2), p(3), h1_.data(), s.hidden1, s.hidden2);
  relu(h2_.data(), z2_.data(), s.hidden2);
  affine(z3_.data(), p(4), p(5), h2_.data(), s.hidden2, s.classes);

  // Softmax cross-entropy, shifted by the largest logit so exp cannot overflow; d3 = p - onehot.
  const auto top = std::max_element(z3_.begin(), z3_.end());
  const float zmax = *top;
  float sum = 0.0f;
  for (std::size_t c = 0; c < s.classes; ++c) sum += std::exp(z3_[c] - zmax);
  const float log_sum = zmax + std::log(sum);
  for (std::size_t c = 0; c < s.classes; ++c) d3_[c] = std::exp(z3_[c] - log_sum);
  d3_[static_cast<std::size_t>(label)] -= 1.0f;
  correct = top - z3_.begin() == label;
  return static_cast<double>(log_sum - z3_[static_cast<std::size_t>(label)]);
}

sample_stats mlp::mean_gradient(const float* params, const dataset& d, const std::uint32_t* index,
                                std::size_t n, float* grad,
                                const std::function<void(std::size_t tensor)>& ready) {
  const mlp_shape& s = shape_;
  std::fill(grad, grad + parameter_count_, 0.0f);
  const auto p = [&](std::size_t t) { return params + tensors_[t].offset; };
  const auto g = [&](std::size_t t) { return grad + tensors_[t].offset; };
  // After the last sample's backward of a layer, its two tensors are divided by n (elementwise:
  // the same bits as one divide over the whole array) and handed to `ready`.
  const auto finish = [&](bool last, std::size_t weight) {
    if (!last) return;
    for (std::size_t t : {weight, weight + 1}) {
      distcomm::divide(g(t), g(t), tensors_[t].count, distcomm::dtype::f32, n);
      if (ready) ready(t);
    }
  };
  sample_stats st;
  for (std::size_t k = 0; k < n; ++k) {
    const bool last = k + 1 == n;
    const float* x = d.sample(index[k]);
    bool correct = false;
    st.loss_sum += forward(params, x, d.y[index[k]], correct);
    st.correct += correct ? 1 : 0;
    affine_backward(g(4), g(5), d2_.data(), p(4), h2_.data(), z2_.data(), d3_.data(), s.hidden2,
                    s.classes);
    finish(last, 4);
    affine_backward(g(2), g(3), d1_.data(), p(2), h1_.data(), z1_.data(), d2_.data(), s.hidden1,
                    s.hidden2);
    finish(last, 2);
    affine_backward(g(0), g(1), nullptr, p(0), x, nullptr, d1_.data(), s.inputs, s.hidden1);
    finish(last, 0);
  }
  st.count = static_cast<double>(n);
  return st;
}

sample_stats mlp::evaluate(const float* params, const dataset& d, std::size_t first,
                           std::size_t n) {
  sample_stats st;
  for (std::size_t i = first; i < first + n; ++i) {
    bool correct = false;
    st.loss_sum += forward(params, d.sample(i), d.y[i], correct);
    st.correct += correct ? 1 : 0;
  }
  st.count = static_cast<double>(n);
  return st;
}

void sgd_step(float* params, float* velocity, const float* grad, std::size_t n, float lr,
              float momentum) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    velocity[i] = momentum * velocity[i] + grad[i];
    params[i] -= lr * velocity[i];
  }
}

}  // namespace train_mlp
