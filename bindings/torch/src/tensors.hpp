// PyTorch tensors as DistComm sees them: a contiguous CPU tensor is a tensor_view of its storage
// (a CUDA tensor is staged through host memory: host_staging); ReduceOps map onto DistComm's.
// Anything else is refused with a c10::Error (a RuntimeError in Python) that names the argument and
// says what to pass instead.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "distcomm/core/dtype.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/core/tensor_view.hpp"

namespace distcomm::torch_binding {

// torch's dtype of DistComm's `type` (Undefined for none).
at::ScalarType scalar_type_of(dtype type);

// `t` as a view; `what` names it in errors ("allreduce tensor").
tensor_view view_of(const at::Tensor& t, const char* what);
// CUDA tensors through host memory, for a collective over a transport that moves host memory
// (every one the binding runs on): each CUDA tensor the collective reads is copied into pinned host
// memory when the collective is called, on the caller's thread and after the work queued on its
// stream (the copy waits for it); each one it writes is copied back from there before its work
// completes, on the thread that completes it (so DDP's hooks, chained on the work's future, see
// the result). CPU tensors are viewed as they are.
class host_staging {
 public:
  // `t` as a view, or its host copy's when `t` is on a CUDA device; `written`: the collective
  // writes it (its host copy goes back into `t`).
  tensor_view view(const at::Tensor& t, const char* what, bool written);
  // `inputs` and the host copies, which the collective uses until it completed.
  std::vector<at::Tensor> keep(std::vector<at::Tensor> inputs) const;
  // The copies back into the CUDA tensors the collective wrote, then `finish`.
  std::function<void()> after(std::function<void()> finish) const;

 private:
  std::vector<at::Tensor> host_;                         // every host copy
  std::vector<std::pair<at::Tensor, at::Tensor>> back_;  // (CUDA tensor, its host copy)
};

// DistComm's reduction for a ReduceOp: SUM, AVG, PRODUCT, MIN, MAX; the others are refused.
reduce_op op_of(const c10d::ReduceOp& op, const char* what);

// Exactly one tensor in `tensors` (PyTorch passes one per device; this group drives one device
// per process).
const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* what);

// Every tensor of `list` has the shape and dtype of `like`, and there are `n` of them.
void check_list(const std::vector<at::Tensor>& list, std::size_t n, const at::Tensor& like,
                const char* what);

// One contiguous tensor holding `parts` one after another (what a list-shaped collective sends),
// and the copy back into them once it has run.
at::Tensor flatten(const std::vector<at::Tensor>& parts);
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& parts);

// Every pair of outputs[i] and inputs[i], the larger of each `times` the other's elements
// (outputs_larger: the outputs), one dtype, the outputs contiguous; `what` names the call.
void check_pairs(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                 std::int64_t times, bool outputs_larger, const char* what);
// Block q of each tensor of `list` (each holds `blocks` blocks), for every q, in that order:
// views of the tensors.
std::vector<at::Tensor> blocks_by_rank(const std::vector<at::Tensor>& list, std::int64_t blocks);

}  // namespace distcomm::torch_binding
