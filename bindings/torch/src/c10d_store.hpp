// The c10d::Store PyTorch hands a process group (TCPStore, FileStore, HashStore, behind the
// group's PrefixStore), seen as DistComm's store: the backends exchange their addresses through
// it, so a job started by torchrun or init_process_group() needs no second port. Every wait is
// bounded by this store's timeout (the group's), and a c10d failure becomes DistComm's error of
// the same kind (timeout_error naming the keys, rendezvous_error otherwise).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>
#include <vector>

#include "distcomm/rendezvous/store.hpp"

namespace distcomm::torch_binding {

class c10d_store final : public store {
 public:
  c10d_store(c10::intrusive_ptr<c10d::Store> s, std::chrono::duration<double> timeout);

  void set(const std::string& key, const bytes& value) override;
  bytes get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys) override;
  bytes compare_set(const std::string& key, const bytes& expected, const bytes& desired) override;

 private:
  c10::intrusive_ptr<c10d::Store> s_;
};

}  // namespace distcomm::torch_binding
