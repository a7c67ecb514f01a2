// The plugin loader: the search path, dlopen, and the ABI version handshake.
#include "distcomm/plugin/loader.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "distcomm/config.hpp"
#include "distcomm/core/error.hpp"

// Set by the build (plugins/loader/CMakeLists.txt).
#ifndef DISTCOMM_PLUGIN_INSTALL_DIR
#define DISTCOMM_PLUGIN_INSTALL_DIR ""
#endif
#ifndef DISTCOMM_PLUGIN_RELATIVE_DIR
#define DISTCOMM_PLUGIN_RELATIVE_DIR ""
#endif
#ifndef DISTCOMM_PLUGIN_BUILD_DIR
#define DISTCOMM_PLUGIN_BUILD_DIR ""
#endif
#ifndef DISTCOMM_PLUGIN_BUILD_TREE
#define DISTCOMM_PLUGIN_BUILD_TREE ""
#endif

namespace distcomm::plugin {
namespace {

const std::string prefix = "libdistcomm_backend_";
const std::string suffix = ".so";

// The ABI versions this loader knows, newest first: a plugin exporting several is loaded through
// the newest. A new version is one line here (and its adapter).
struct abi_version {
  int version;
  const char* symbol;
};
constexpr abi_version known_versions[] = {
    {DISTCOMM_BACKEND_V1_VERSION, DISTCOMM_BACKEND_V1_SYMBOL},
};

std::string running_program() {
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n)) : std::string();
}

std::string folder_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

bool is_file(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

std::string joined(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// The plugin's declaration (distcomm_backend_traits_v1.h), nullptr when it exports none;
// invalid_argument_error when it is of another version or declares capabilities this DistComm
// does not know.
const distcomm_backend_traits_v1* declared_traits(void* handle, const std::string& path) {
  ::dlerror();
  void* sym = ::dlsym(handle, DISTCOMM_BACKEND_TRAITS_V1_SYMBOL);
  if (sym == nullptr) return nullptr;
  const auto entry = reinterpret_cast<distcomm_backend_traits_v1_fn>(sym);
  const distcomm_backend_traits_v1* t = entry();
  const std::string where =
      "backend plugin " + path + " (" + DISTCOMM_BACKEND_TRAITS_V1_SYMBOL + ")";
  if (t == nullptr) {
    throw invalid_argument_error(where +
                                 " returned no declaration; the plugin is broken: rebuild "
                                 "it, or export no such function");
  }
  if (t->version != DISTCOMM_BACKEND_TRAITS_V1_VERSION ||
      t->struct_size < sizeof(distcomm_backend_traits_v1)) {
    throw invalid_argument_error(
        where + " returned a declaration of version " + std::to_string(t->version) + " and " +
        std::to_string(t->struct_size) + " bytes, expected version " +
        std::to_string(DISTCOMM_BACKEND_TRAITS_V1_VERSION) + " of at least " +
        std::to_string(sizeof(distcomm_backend_traits_v1)) +
        " bytes: rebuild the plugin against this DistComm's distcomm_backend_traits_v1.h");
  }
  std::uint32_t known = 0;
  for (const capability_name& c : capability_names) known |= static_cast<std::uint32_t>(c.value);
  if ((t->capabilities & ~known) != 0) {
    throw invalid_argument_error(where +
                                 " declares capabilities this DistComm does not know (bits " +
                                 std::to_string(t->capabilities & ~known) +
                                 "): rebuild the plugin against this DistComm's header");
  }
  return t;
}

}  // namespace

std::string file_name(const std::string& name) { return prefix + name + suffix; }

std::vector<std::string> search_path() { return search_path(config::process_environment); }

std::vector<std::string> search_path(const env_lookup& getenv) {
  std::vector<std::string> dirs;
  const auto add = [&](const std::string& d) {
    if (!d.empty() && std::find(dirs.begin(), dirs.end(), d) == dirs.end()) dirs.push_back(d);
  };
  if (const char* p = config::read_variable("DISTCOMM_PLUGIN_PATH", getenv); p != nullptr) {
    std::string s = p;
    std::size_t start = 0;
    while (start <= s.size()) {
      const auto colon = s.find(':', start);
      const auto end = colon == std::string::npos ? s.size() : colon;
      add(s.substr(start, end - start));
      start = end + 1;
    }
  }
  add(DISTCOMM_PLUGIN_INSTALL_DIR);
  const std::string program = running_program();
  // An installation moved to another prefix (or installed with --prefix): bin/../lib/...
  if (!program.empty() && *DISTCOMM_PLUGIN_RELATIVE_DIR != '\0') {
    add(folder_of(folder_of(program)) + "/" + DISTCOMM_PLUGIN_RELATIVE_DIR);
  }
  const std::string tree = DISTCOMM_PLUGIN_BUILD_TREE;
  if (!tree.empty() && program.compare(0, tree.size() + 1, tree + "/") == 0) {
    add(DISTCOMM_PLUGIN_BUILD_DIR);
  }
  return dirs;
}

std::vector<available> list() { return list(config::process_environment); }

std::vector<available> list(const env_lookup& getenv) { return list_of(prefix, getenv); }

std::vector<available> list_of(const std::string& prefix, const env_lookup& getenv) {
  std::map<std::string, std::string> seen;
  for (const std::string& dir : search_path(getenv)) {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) continue;
    while (const dirent* e = ::readdir(d)) {
      const std::string f = e->d_name;
      if (f.size() <= prefix.size() + suffix.size() || f.compare(0, prefix.size(), prefix) != 0 ||
          f.compare(f.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      const std::string name = f.substr(prefix.size(), f.size() - prefix.size() - suffix.size());
      seen.emplace(name, dir + "/" + f);  // the first folder wins
    }
    ::closedir(d);
  }
  std::vector<available> out;
  for (const auto& [name, path] : seen) out.push_back({name, path});
  return out;
}

library load(const std::string& name) { return load(name, config::process_environment); }

library load(const std::string& name, const env_lookup& getenv) {
  if (name.find('/') != std::string::npos) return load_file(name);
  if (name.empty() || name.find_first_of(" :\t") != std::string::npos) {
    throw invalid_argument_error("plugin name '" + name +
                                 "' is not a backend name (letters, digits, '_' or '-')");
  }
  const std::vector<std::string> dirs = search_path(getenv);
  for (const std::string& dir : dirs) {
    const std::string path = dir + "/" + file_name(name);
    if (is_file(path)) return load_file(path);
  }
  std::vector<std::string> names;
  for (const auto& a : list(getenv)) names.push_back(a.name);
  const char* env = config::read_variable("DISTCOMM_PLUGIN_PATH", getenv);
  throw invalid_argument_error(
      "backend plugin '" + name + "' not found: no " + file_name(name) + " in " +
      (dirs.empty() ? std::string("(no folder to search)") : joined(dirs)) +
      " (DISTCOMM_PLUGIN_PATH=" + (env != nullptr ? "'" + std::string(env) + "'" : "unset") +
      ", then the installation's plugin folder). Plugins found there: " +
      (names.empty() ? std::string("none") : joined(names)) +
      ". Build or install that plugin, or add the folder holding it to DISTCOMM_PLUGIN_PATH");
}

library load_file(const std::string& path) {
  // One handle per file; never closed: code of a plugin may still run from its atexit handlers
  // and thread-local destructors, and reloading would reinitialise its statics.
  static std::mutex m;
  static std::map<std::string, library> loaded;
  std::lock_guard<std::mutex> lock(m);
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;

  // RTLD_LOCAL: the plugin's own copy of DistComm and of its transport stays its own.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw invalid_argument_error("backend plugin " + path +
                                 " cannot be loaded: " + (why != nullptr ? why : "dlopen failed") +
                                 ". Check that the file is a plugin built for this machine and "
                                 "that the libraries it needs are installed (ldd " +
                                 path + ")");
  }
  std::vector<std::string> tried;
  for (const abi_version& v : known_versions) {
    ::dlerror();
    void* sym = ::dlsym(handle, v.symbol);
    if (sym == nullptr) {
      tried.push_back(v.symbol);
      continue;
    }
    const auto entry = reinterpret_cast<distcomm_backend_plugin_v1_fn>(sym);
    const distcomm_backend_v1* t = entry();
    const std::string where = "backend plugin " + path + " (" + v.symbol + ")";
    if (t == nullptr) {
      throw invalid_argument_error(where + " returned no table; the plugin is broken: rebuild it");
    }
    if (t->version != static_cast<std::uint32_t>(v.version)) {
      throw invalid_argument_error(
          where + " returned a table of version " + std::to_string(t->version) + ", expected " +
          std::to_string(v.version) + ". Rebuild the plugin against the distcomm_backend_v" +
          std::to_string(v.version) + ".h of this DistComm");
    }
    if (t->struct_size < sizeof(distcomm_backend_v1)) {
      throw invalid_argument_error(
          where + " returned a table of " + std::to_string(t->struct_size) +
          " bytes, older than this DistComm's " + std::to_string(sizeof(distcomm_backend_v1)) +
          ": rebuild the plugin against this DistComm's header");
    }
    std::vector<std::string> missing;
    const auto need = [&](const void* f, const char* field) {
      if (f == nullptr) missing.push_back(field);
    };
    need(reinterpret_cast<const void*>(t->init), "init");
    need(reinterpret_cast<const void*>(t->finalize), "finalize");
    need(reinterpret_cast<const void*>(t->rank), "rank");
    need(reinterpret_cast<const void*>(t->size), "size");
    need(reinterpret_cast<const void*>(t->isend), "isend");
    need(reinterpret_cast<const void*>(t->irecv), "irecv");
    need(reinterpret_cast<const void*>(t->test), "test");
    need(reinterpret_cast<const void*>(t->wait), "wait");
    need(reinterpret_cast<const void*>(t->cancel), "cancel");
    need(reinterpret_cast<const void*>(t->free_request), "free_request");
    need(reinterpret_cast<const void*>(t->abort), "abort");
    if (!missing.empty()) {
      throw invalid_argument_error(where + " lacks required functions: " + joined(missing) +
                                   "; the plugin is incomplete: fill them in and rebuild it");
    }
    library lib;
    lib.table_ = t;
    lib.traits_ = declared_traits(handle, path);
    lib.path_ = path;
    lib.symbol_ = v.symbol;
    lib.version_ = v.version;
    loaded.emplace(path, lib);
    return lib;
  }
  // Only a newer DistComm knows the versions this plugin may export.
  throw invalid_argument_error("backend plugin " + path + " exports none of the entry points " +
                               joined(tried) +
                               " this DistComm knows: it is not a DistComm backend plugin, or "
                               "one of a newer ABI version; rebuild it against this DistComm's "
                               "distcomm_backend_v1.h, or use a newer DistComm");
}

backend_traits traits_of(const library& lib) {
  const distcomm_backend_v1& t = lib.table();
  const distcomm_backend_traits_v1* d = lib.declared();
  backend_traits traits(
      t.name != nullptr ? t.name : "(unnamed)",
      d != nullptr && d->summary != nullptr ? d->summary : "a backend plugin (no declaration)");
  if ((t.flags & DISTCOMM_V1_DEVICE_MEMORY) != 0) traits = traits.moves(memory_kind::cuda);
  return traits.with(d != nullptr ? static_cast<capability>(d->capabilities)
                                  : capability::processes | capability::store);
}

}  // namespace distcomm::plugin
