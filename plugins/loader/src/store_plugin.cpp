// Store plugins: finding libdistcomm_store_<scheme>.so, its ABI handshake, and its opened store
// as a distcomm::store (host_store, store_abi.hpp).
#include "distcomm/plugin/store_plugin.hpp"

#include <dlfcn.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"
#include "distcomm/distcomm_store_plugin_v1.h"
#include "distcomm/plugin/abi.hpp"
#include "distcomm/plugin/store_abi.hpp"

namespace distcomm::plugin {
namespace {

const std::string prefix = "libdistcomm_store_";
const std::string suffix = ".so";

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// What to do when a scheme's plugin is missing, for the ones this tree builds.
std::string how_to_get(const std::string& scheme) {
  if (scheme == "c10d") {
    return "DistComm builds it where libtorch is found (libtorch-dev, or Torch_DIR for another "
           "libtorch); or start a distcomm-store and give the ranks DISTCOMM_STORE_ADDR";
  }
  return "build or install that plugin";
}

// The plugin's table, loaded once per file and never unloaded.
const distcomm_store_plugin_table_v1& load_store_plugin(const std::string& path,
                                                        const std::string& scheme) {
  static std::mutex m;
  static std::map<std::string, const distcomm_store_plugin_table_v1*> loaded;
  std::lock_guard<std::mutex> lock(m);
  if (auto it = loaded.find(path); it != loaded.end()) return *it->second;
  const std::string where = "store plugin " + path;
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw rendezvous_error(where +
                           " cannot be loaded: " + (why != nullptr ? why : "dlopen failed") +
                           ". Check that the libraries it needs are installed (ldd " + path + ")");
  }
  void* sym = ::dlsym(handle, DISTCOMM_STORE_PLUGIN_V1_SYMBOL);
  if (sym == nullptr) {
    throw rendezvous_error(where + " exports no " + DISTCOMM_STORE_PLUGIN_V1_SYMBOL +
                           ": not a store plugin, or of a newer ABI; rebuild it");
  }
  const distcomm_store_plugin_table_v1* t = reinterpret_cast<distcomm_store_plugin_v1_fn>(sym)();
  if (t == nullptr || t->version != DISTCOMM_STORE_PLUGIN_V1_VERSION ||
      t->struct_size < sizeof(distcomm_store_plugin_table_v1) || t->open == nullptr) {
    throw rendezvous_error(
        where + " returned " +
        (t == nullptr ? std::string("no table")
                      : "a table of version " + std::to_string(t->version) + " and " +
                            std::to_string(t->struct_size) + " bytes") +
        ", expected version " + std::to_string(DISTCOMM_STORE_PLUGIN_V1_VERSION) +
        " with open(): rebuild it against this DistComm's header");
  }
  if (t->scheme == nullptr || scheme != t->scheme) {
    throw rendezvous_error(where + " serves the scheme '" +
                           (t->scheme != nullptr ? t->scheme : "") + "', not '" + scheme +
                           "': rename or rebuild it");
  }
  loaded.emplace(path, t);
  return *t;
}

}  // namespace

std::string store_file_name(const std::string& scheme) { return prefix + scheme + suffix; }

std::shared_ptr<store> open_plugin_store(const store_request& r) {
  return open_plugin_store(r, config::process_environment);
}

std::shared_ptr<store> open_plugin_store(const store_request& r, const env_lookup& getenv) {
  if (r.scheme.empty() ||
      r.scheme.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos) {
    throw rendezvous_error("DISTCOMM_STORE='" + r.url + "': the scheme '" + r.scheme +
                           "' is not a store's name (lower-case letters, digits, '_', '-')");
  }
  std::string path;
  std::vector<std::string> found;
  for (const available& a : list_of(prefix, getenv)) {
    if (a.name == r.scheme) path = a.path;
    found.push_back(a.name);
  }
  if (path.empty()) {
    const std::vector<std::string> dirs = search_path(getenv);
    throw rendezvous_error(
        "rank " + std::to_string(r.rank) + ": the store " + r.url + " needs the store plugin " +
        store_file_name(r.scheme) + ", not found in " +
        (dirs.empty() ? std::string("(no folder to search)") : joined(dirs)) +
        " (DISTCOMM_PLUGIN_PATH, then the installation's plugin folder). Store plugins found "
        "there: " +
        (found.empty() ? std::string("none") : joined(found)) + " (built in: etcd). " +
        how_to_get(r.scheme));
  }
  const distcomm_store_plugin_table_v1& t = load_store_plugin(path, r.scheme);
  distcomm_store_open_args_v1 args{};
  args.struct_size = sizeof args;
  args.url = r.url.c_str();
  args.address = r.address.c_str();
  args.timeout_s = r.timeout.count();
  args.token = r.token.c_str();
  args.job_id = r.job.id.c_str();
  args.world_size = r.job.world_size;
  args.rank = r.rank;
  args.log = &log_line;
  distcomm_opened_store_v1 opened{};
  error_buffer err;
  const int status = t.open(&args, &opened, &err);
  if (status != DISTCOMM_V1_OK) {
    throw_status(status, "store plugin " + r.scheme, "open",
                 "rank " + std::to_string(r.rank) + ": the store " + r.url + " (" + path +
                     "): " + error_text(err));
  }
  if (opened.base.set == nullptr || opened.base.get == nullptr || opened.base.add == nullptr ||
      opened.base.check == nullptr || opened.wait == nullptr || opened.compare_set == nullptr) {
    if (opened.close != nullptr) opened.close(opened.base.user);
    throw rendezvous_error("store plugin " + path +
                           " opened a store without set, get, add, check, wait or compare_set: "
                           "the plugin is broken; rebuild it");
  }
  return std::make_shared<host_store>(opened, r.timeout);
}

void enable_store_plugins() {
  static std::once_flag once;
  std::call_once(once, [] {
    set_store_plugin_opener([](const store_request& r) { return open_plugin_store(r); });
  });
}

}  // namespace distcomm::plugin
