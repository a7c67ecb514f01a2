// Store plugins (distcomm_store_plugin_v1.h): DISTCOMM_STORE=<scheme>://... for a scheme DistComm
// does not build in loads libdistcomm_store_<scheme>.so from the folders backend plugins are
// found in (loader.hpp) and connects through it. The c10d plugin (bindings/torch/store) speaks
// to a c10d TCPStore, the store torchrun's agent hosts. plugins/README.md, "Store plugins".
#pragma once

#include <memory>
#include <string>

#include "distcomm/plugin/loader.hpp"
#include "distcomm/rendezvous/store.hpp"
#include "distcomm/rendezvous/store_url.hpp"

namespace distcomm::plugin {

// libdistcomm_store_<scheme>.so
std::string store_file_name(const std::string& scheme);

// The store the request names, through its scheme's plugin. rendezvous_error when no plugin
// serves the scheme (naming the file, the folders searched and the store plugins there), when
// it cannot be loaded or is of another ABI version, or when its open() fails (its own text, of
// its own kind: timeout_error when the store was not reached in time).
std::shared_ptr<store> open_plugin_store(const store_request& request);
std::shared_ptr<store> open_plugin_store(const store_request& request, const env_lookup& getenv);

// From now on, bootstrap() opens the schemes it does not build in through their plugins
// (set_store_plugin_opener). init(), the hierarchical communicator and plugin_backend::open
// call it; a program that calls bootstrap() itself calls it first.
void enable_store_plugins();

}  // namespace distcomm::plugin
