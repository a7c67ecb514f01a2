#include "tensors.hpp"

#include <string>
#include <utility>

namespace distcomm::torch_binding {

namespace {

// torch's dtype of each of DistComm's.
constexpr std::pair<at::ScalarType, dtype> dtype_pairs[] = {
    {at::kFloat, dtype::f32},     {at::kDouble, dtype::f64}, {at::kHalf, dtype::f16},
    {at::kBFloat16, dtype::bf16}, {at::kChar, dtype::i8},    {at::kByte, dtype::u8},
    {at::kInt, dtype::i32},       {at::kLong, dtype::i64}};

dtype dtype_of(const at::Tensor& t, const char* what) {
  for (const auto& [torch_type, ours] : dtype_pairs) {
    if (t.scalar_type() == torch_type) return ours;
  }
  TORCH_CHECK(false, "distcomm: ", what, " has dtype ", t.scalar_type(),
              "; DistComm moves float32, float64, float16, bfloat16, int8, uint8, int32 and "
              "int64 tensors: convert it first (e.g. tensor.to(torch.uint8) for bool)");
}

}  // namespace

at::ScalarType scalar_type_of(dtype type) {
  for (const auto& [torch_type, ours] : dtype_pairs) {
    if (ours == type) return torch_type;
  }
  return at::ScalarType::Undefined;
}

tensor_view view_of(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "distcomm: ", what, " is an undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "distcomm: ", what, " is ", t.layout(),
              "; only dense tensors are supported");
  TORCH_CHECK(t.device().is_cpu(), "distcomm: ", what, " is on ", t.device(),
              "; this process group moves CPU and CUDA tensors (move it with .cpu())");
  TORCH_CHECK(t.is_contiguous(), "distcomm: ", what,
              " is not contiguous; pass tensor.contiguous() (collectives write the tensor's "
              "storage in place)");
  return tensor_view{t.data_ptr(), static_cast<std::size_t>(t.numel()), dtype_of(t, what)};
}

tensor_view host_staging::view(const at::Tensor& t, const char* what, bool written) {
  if (!t.defined() || !t.is_cuda()) return view_of(t, what);
  TORCH_CHECK(t.is_contiguous(), "distcomm: ", what,
              " is not contiguous; pass tensor.contiguous() (collectives write the tensor's "
              "storage in place)");
  at::Tensor host = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
  host.copy_(t);  // waits for t's stream
  host_.push_back(host);
  if (written) back_.emplace_back(t, host);
  return view_of(host, what);
}

std::vector<at::Tensor> host_staging::keep(std::vector<at::Tensor> inputs) const {
  inputs.insert(inputs.end(), host_.begin(), host_.end());
  return inputs;
}

std::function<void()> host_staging::after(std::function<void()> finish) const {
  if (back_.empty()) return finish;
  return [back = back_, finish = std::move(finish)] {
    for (const auto& [device, host] : back) device.copy_(host);
    if (finish) finish();
  };
}

reduce_op op_of(const c10d::ReduceOp& op, const char* what) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return reduce_op::sum;
    case c10d::ReduceOp::AVG:
      return reduce_op::avg;
    case c10d::ReduceOp::PRODUCT:
      return reduce_op::prod;
    case c10d::ReduceOp::MIN:
      return reduce_op::min;
    case c10d::ReduceOp::MAX:
      return reduce_op::max;
    default:
      break;
  }
  TORCH_CHECK(false, "distcomm: ", what,
              " with a ReduceOp DistComm does not have (BAND, BOR, BXOR, PREMUL_SUM); it "
              "reduces with SUM, AVG, PRODUCT, MIN and MAX");
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "distcomm: ", what, " takes one tensor per process, got ",
              tensors.size(),
              " (one per device is for multi-device processes, which this "
              "group does not drive)");
  return tensors[0];
}

void check_list(const std::vector<at::Tensor>& list, std::size_t n, const at::Tensor& like,
                const char* what) {
  TORCH_CHECK(list.size() == n, "distcomm: ", what, " needs ", n, " tensors, got ", list.size());
  for (const at::Tensor& t : list) {
    TORCH_CHECK(t.scalar_type() == like.scalar_type(), "distcomm: ", what, " mixes dtypes ",
                t.scalar_type(), " and ", like.scalar_type());
    TORCH_CHECK(t.numel() == like.numel(), "distcomm: ", what, " holds a tensor of ", t.numel(),
                " elements where ", like.numel(), " are expected (sizes must match)");
    TORCH_CHECK(t.device() == like.device(), "distcomm: ", what, " mixes devices");
  }
}

at::Tensor flatten(const std::vector<at::Tensor>& parts) {
  std::vector<at::Tensor> flat;
  flat.reserve(parts.size());
  for (const at::Tensor& p : parts) flat.push_back(p.reshape({-1}));
  return at::cat(flat);
}

void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& parts) {
  std::int64_t at = 0;
  for (const at::Tensor& p : parts) {
    p.copy_(flat.narrow(0, at, p.numel()).view(p.sizes()));
    at += p.numel();
  }
}

void check_pairs(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                 std::int64_t times, bool outputs_larger, const char* what) {
  TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(), "distcomm: ", what,
              " takes as many outputs as inputs, at least one; got ", outputs.size(), " and ",
              inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& small = outputs_larger ? inputs[i] : outputs[i];
    const at::Tensor& large = outputs_larger ? outputs[i] : inputs[i];
    TORCH_CHECK(large.numel() == small.numel() * times, "distcomm: ", what, " pair ", i, ": ",
                large.numel(), " elements where world size × ", small.numel(), " are needed");
    TORCH_CHECK(inputs[i].scalar_type() == inputs[0].scalar_type() &&
                    outputs[i].scalar_type() == inputs[0].scalar_type(),
                "distcomm: ", what, " tensors must share one dtype");
    TORCH_CHECK(outputs[i].is_contiguous(), "distcomm: ", what, " output ", i,
                " is not contiguous");
  }
}

std::vector<at::Tensor> blocks_by_rank(const std::vector<at::Tensor>& list, std::int64_t blocks) {
  std::vector<at::Tensor> parts;
  for (std::int64_t q = 0; q < blocks; ++q) {
    for (const at::Tensor& t : list) {
      const std::int64_t n = t.numel() / blocks;
      parts.push_back(t.reshape({-1}).narrow(0, q * n, n));
    }
  }
  return parts;
}

}  // namespace distcomm::torch_binding
