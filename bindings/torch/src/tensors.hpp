// PyTorch tensors as DistComm sees them: a contiguous CPU (or, with NCCL, CUDA) tensor is a
// tensor_view of its storage; ReduceOps map onto DistComm's. Anything else is refused with a
// c10::Error (a RuntimeError in Python) that names the argument and says what to pass instead.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstddef>
#include <vector>

#include "distcomm/core/reduce_op.hpp"
#include "distcomm/core/tensor_view.hpp"

namespace distcomm::torch_binding {

// `t` as a view; `what` names it in errors ("allreduce tensor").
tensor_view view_of(const at::Tensor& t, const char* what);
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

}  // namespace distcomm::torch_binding
