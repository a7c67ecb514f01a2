// DistComm umbrella header: core types, configuration, strategies, fusion, the communicator and
// every backend this installation was built with; init() where DistComm::init is linked.
#pragma once

#include "distcomm/any_communicator.hpp"
#include "distcomm/async/work.hpp"
#include "distcomm/backend.hpp"
#include "distcomm/communicator.hpp"
#include "distcomm/config.hpp"
#include "distcomm/core/dtype.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/core/half.hpp"
#include "distcomm/core/partition.hpp"
#include "distcomm/core/reduce.hpp"
#include "distcomm/core/reduce_op.hpp"
#include "distcomm/core/span.hpp"
#include "distcomm/core/tensor_view.hpp"
#include "distcomm/fusion/buffer.hpp"
#include "distcomm/fusion/none.hpp"
#include "distcomm/log.hpp"
#include "distcomm/registry/strategies.hpp"
#include "distcomm/rendezvous/bootstrap.hpp"
#include "distcomm/rendezvous/file_store.hpp"
#include "distcomm/rendezvous/hash_store.hpp"
#include "distcomm/rendezvous/prefix_store.hpp"
#include "distcomm/rendezvous/store.hpp"
#include "distcomm/rendezvous/tcp_store.hpp"
#include "distcomm/rendezvous/world.hpp"
#include "distcomm/strategy/automatic.hpp"
#include "distcomm/strategy/native.hpp"
#include "distcomm/strategy/parameter_server.hpp"
#include "distcomm/strategy/recursive_doubling.hpp"
#include "distcomm/strategy/ring.hpp"
#include "distcomm/strategy/table.hpp"
#include "distcomm/strategy/tree.hpp"

// The run-time layer (DistComm::init: init(), the registry of backends), where it is linked.
#if __has_include("distcomm/init.hpp")
#include "distcomm/init.hpp"
#endif
#if __has_include("distcomm/backends/local.hpp")
#include "distcomm/backends/local.hpp"
#endif
