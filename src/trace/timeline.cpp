// trace::timeline: see include/distcomm/trace/timeline.hpp.
#include "distcomm/trace/timeline.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "distcomm/core/error.hpp"
#include "distcomm/core/files.hpp"

namespace distcomm::trace {

struct timeline::file {
  std::FILE* f = nullptr;
  bool first = true;
  // Written out with the first event and then whenever 100 ms have passed since the last time,
  // so that a rank that dies (SIGKILL) leaves its timeline for distcomm-trace, short of less than
  // 100 ms of events before its last, at the cost of at most one write per 100 ms. The flight
  // recorder's dumps write out everything (a hung rank read with SIGUSR1).
  static constexpr std::chrono::milliseconds flush_every{100};
  std::chrono::steady_clock::time_point flushed{};
  ~file() {
    if (f != nullptr) {
      std::fputs("\n]}\n", f);
      std::fclose(f);
    }
  }
};

namespace {
// The open timelines of this process by path: communicators and engines of one rank share one.
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, std::weak_ptr<timeline>>& registry() {
  static std::map<std::string, std::weak_ptr<timeline>> r;
  return r;
}

double micros(timeline::time_point t) {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}
}  // namespace

std::shared_ptr<timeline> timeline::open(const std::string& pattern, int rank) {
  if (pattern.empty()) return nullptr;
  std::string path;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'r') {
      path += std::to_string(rank);
      ++i;
    } else {
      path += pattern[i];
    }
  }
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (auto existing = registry()[path].lock()) return existing;
  auto f = std::make_unique<file>();
  // Never through a link planted at the path (core/files.hpp): streamed as the job runs, the
  // file is opened in place, refusing a link there.
  const int fd = open_for_writing(path);
  if (fd >= 0) f->f = ::fdopen(fd, "w");
  if (f->f == nullptr) {
    const int e = errno;
    if (fd >= 0) ::close(fd);
    throw invalid_argument_error(
        "DISTCOMM_TIMELINE='" + pattern + "': cannot write '" + path + "': " +
        (e == ELOOP ? std::string("it is a symbolic link, and DistComm writes through none; "
                                  "remove it or name another path")
                    : std::string(std::strerror(e)) + " (does its folder exist?)"));
  }
  std::fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", f->f);
  auto t = std::make_shared<timeline>(path, rank, std::move(f));
  registry()[path] = t;
  return t;
}

timeline::timeline(std::string path, int rank, std::unique_ptr<file> f)
    : path_(std::move(path)), rank_(rank), file_(std::move(f)) {
  write("{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + std::to_string(rank_) +
        ", \"args\": {\"name\": \"rank " + std::to_string(rank_) + "\"}}");
  write("{\"ph\": \"M\", \"name\": \"process_sort_index\", \"pid\": " + std::to_string(rank_) +
        ", \"args\": {\"sort_index\": " + std::to_string(rank_) + "}}");
}

timeline::~timeline() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(path_);
  if (it != registry().end() && it->second.expired()) registry().erase(it);
}

std::string timeline::quote(const std::string& s) { return nlohmann::json(s).dump(); }

int timeline::track(const std::string& name) {
  int id = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = ++tracks_;
  }
  write("{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + std::to_string(rank_) +
        ", \"tid\": " + std::to_string(id) + ", \"args\": {\"name\": " + quote(name) + "}}");
  return id;
}

void timeline::span(int track, const std::string& name, const char* category, time_point begin,
                    time_point end, const std::string& args) {
  write("{\"ph\": \"X\", \"name\": " + quote(name) + ", \"cat\": \"" + category +
        "\", \"pid\": " + std::to_string(rank_) + ", \"tid\": " + std::to_string(track) +
        ", \"ts\": " + number(micros(begin)) + ", \"dur\": " + number(micros(end) - micros(begin)) +
        ", \"args\": {" + args + "}}");
}

void timeline::async_span(const std::string& name, const char* category, std::uint64_t id,
                          time_point begin, time_point end, const std::string& args) {
  const std::string common = "\"name\": " + quote(name) + ", \"cat\": \"" + category +
                             "\", \"pid\": " + std::to_string(rank_) +
                             ", \"id\": " + std::to_string(id);
  write("{\"ph\": \"b\", " + common + ", \"ts\": " + number(micros(begin)) + ", \"args\": {" +
        args + "}}");
  write("{\"ph\": \"e\", " + common + ", \"ts\": " + number(micros(end)) + "}");
}

void timeline::write(const std::string& event) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!file_->first) std::fputs(",\n", file_->f);
  file_->first = false;
  std::fputs(event.c_str(), file_->f);
  const auto now = std::chrono::steady_clock::now();
  if (now - file_->flushed >= file::flush_every) {
    std::fflush(file_->f);
    file_->flushed = now;
  }
}

}  // namespace distcomm::trace
