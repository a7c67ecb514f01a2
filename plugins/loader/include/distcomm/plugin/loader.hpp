// Finding and loading backend plugins (libdistcomm_backend_<name>.so, plugins/README.md). A plugin
// is looked for on DISTCOMM_PLUGIN_PATH (colon-separated folders), then in this installation's
// plugin folder, then in the plugin folder beside the running program's installation, then, for
// a program of DistComm's own build tree, in that tree's lib folder. A loaded plugin stays loaded
// until the process ends. Every failure names the file, the symbol and what to do.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distcomm/backend_traits.hpp"
#include "distcomm/distcomm_backend_traits_v1.h"
#include "distcomm/distcomm_backend_v1.h"

namespace distcomm::plugin {

using env_lookup = std::function<const char*(const char*)>;

// The plugin a DISTCOMM_BACKEND value names: `plugin:<name>` (the plugin form even of a backend
// that is built in) or the name itself.
inline std::string plugin_named(const std::string& backend) {
  const std::string prefix = "plugin:";
  return backend.compare(0, prefix.size(), prefix) == 0 ? backend.substr(prefix.size()) : backend;
}

// The file a plugin named `name` lives in: libdistcomm_backend_<name>.so.
std::string file_name(const std::string& name);

// The folders searched, in order, without duplicates (DISTCOMM_PLUGIN_PATH first).
std::vector<std::string> search_path();
std::vector<std::string> search_path(const env_lookup& getenv);

struct available {
  std::string name;  // what DISTCOMM_BACKEND names it
  std::string path;  // the file that would be loaded
};
// The plugins visible on the search path, by name (the first folder holding a name wins): for
// --help texts and error messages. Does not load them.
std::vector<available> list();
std::vector<available> list(const env_lookup& getenv);
// The same for the files named `<file_prefix><name>.so` (libdistcomm_store_ for store plugins).
std::vector<available> list_of(const std::string& file_prefix, const env_lookup& getenv);

// A loaded plugin: the newest ABI table it exports. Copies share the library.
class library {
 public:
  // The table (of version 1, the only one this loader knows).
  const distcomm_backend_v1& table() const noexcept { return *table_; }
  const std::string& path() const noexcept { return path_; }
  const std::string& symbol() const noexcept { return symbol_; }
  int version() const noexcept { return version_; }
  // The backend's own name, from its table.
  std::string name() const { return table_->name != nullptr ? table_->name : "(unnamed)"; }
  // What the plugin declares it is and can do (distcomm_backend_traits_v1.h), or nullptr when it
  // exports no declaration.
  const distcomm_backend_traits_v1* declared() const noexcept { return traits_; }

 private:
  friend library load_file(const std::string& path);
  const distcomm_backend_v1* table_ = nullptr;
  const distcomm_backend_traits_v1* traits_ = nullptr;
  std::string path_;
  std::string symbol_;
  int version_ = 0;
};

// Loads plugin `name` from the search path; a name holding a '/' is a file path. Throws
// invalid_argument_error when no such plugin is found (naming the folders searched and the
// plugins there), and like load_file() when it cannot be loaded.
library load(const std::string& name);
library load(const std::string& name, const env_lookup& getenv);
// Loads the plugin in `path`: invalid_argument_error when dlopen fails (its reason), when the file
// exports none of the known entry points (naming those tried), or when its table is of an unknown
// or older version, or lacks a required function.
library load_file(const std::string& path);

// The plugin's backend as a built one declares itself: its table's name and memory
// (DISTCOMM_V1_DEVICE_MEMORY), and the capabilities and summary of its declaration; a plugin that
// declares none is taken to run processes meeting through the job's store, and nothing more.
backend_traits traits_of(const library& lib);

}  // namespace distcomm::plugin
