// trace::timeline: a Chrome trace (the JSON object format, {"traceEvents": [...]}, which Perfetto
// and chrome://tracing open) of one rank's collectives and engine phases, written as they happen
// to the file DISTCOMM_TIMELINE names (%r becomes the rank). One process per rank (pid = rank),
// one track per communicator and engine (thread names say which); timestamps are microseconds of
// the system clock, so the files of all ranks line up on one host, and `distcomm-timeline merge`
// joins them into one. Every communicator and engine of a rank that names the same file shares
// one timeline. The file is complete (valid JSON) once the last of them is destroyed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace distcomm::trace {

class timeline {
 public:
  using time_point = std::chrono::system_clock::time_point;

  // The timeline of `pattern` with %r replaced by `rank`, shared with whoever opened the same
  // file in this process; nullptr when pattern is empty. Throws invalid_argument_error naming
  // DISTCOMM_TIMELINE when the file cannot be written.
  static std::shared_ptr<timeline> open(const std::string& pattern, int rank);
  ~timeline();
  timeline(const timeline&) = delete;
  timeline& operator=(const timeline&) = delete;

  static time_point now() { return std::chrono::system_clock::now(); }

  // A new track (a "thread" of the trace), named `name`, e.g. "collectives (gloo, ring)".
  int track(const std::string& name);
  // A span on `track`; `args` is a JSON object's members without braces ("\"bytes\": 4096") or
  // empty. Spans of one track nest or follow each other.
  void span(int track, const std::string& name, const char* category, time_point begin,
            time_point end, const std::string& args = {});
  // A span that may overlap others (one per tensor, e.g. its time in the queue), drawn as an
  // async slice with its own id.
  void async_span(const std::string& name, const char* category, std::uint64_t id, time_point begin,
                  time_point end, const std::string& args = {});

  const std::string& path() const noexcept { return path_; }
  // A JSON string literal of s, quotes included.
  static std::string quote(const std::string& s);

  struct file;  // the open file (src/trace/timeline.cpp)
  timeline(std::string path, int rank, std::unique_ptr<file> f);

 private:
  void write(const std::string& event);
  std::string path_;
  int rank_;
  std::mutex mutex_;
  std::unique_ptr<file> file_;
  int tracks_ = 0;
};

}  // namespace distcomm::trace
