// --tag-output: turns the bytes a rank writes into whole lines that start with `[rank] `, so the
// launcher can write each line with one call and lines of different ranks never mix.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace distcomm::launcher {

class line_tagger {
 public:
  // A line longer than max_line bytes is cut there (and continues on a new tagged line), so a
  // rank that never writes a newline cannot make the launcher buffer without bound.
  explicit line_tagger(std::string prefix, std::size_t max_line = std::size_t{64} << 10)
      : prefix_(std::move(prefix)), max_line_(max_line == 0 ? 1 : max_line) {}

  // Takes n more bytes; returns the lines they completed, tagged, each ending in '\n'.
  std::string feed(const char* data, std::size_t n);
  // The unfinished last line, tagged and given a '\n'; empty when there is none.
  std::string flush();

 private:
  std::string prefix_;
  std::size_t max_line_;
  std::string partial_;
};

}  // namespace distcomm::launcher
