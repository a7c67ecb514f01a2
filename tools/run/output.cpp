#include "output.hpp"

namespace distcomm::launcher {

std::string line_tagger::feed(const char* data, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n;) {
    const std::size_t room = max_line_ - partial_.size();
    std::size_t take = 0;
    bool newline = false;
    while (take < n - i && take < room) {
      if (data[i + take++] == '\n') {
        newline = true;
        break;
      }
    }
    partial_.append(data + i, take);
    i += take;
    if (newline) {
      out += prefix_;
      out += partial_;
      partial_.clear();
    } else if (partial_.size() >= max_line_) {
      out += prefix_;
      out += partial_;
      out += '\n';
      partial_.clear();
    }
  }
  return out;
}

std::string line_tagger::flush() {
  if (partial_.empty()) return {};
  std::string out = prefix_ + partial_ + '\n';
  partial_.clear();
  return out;
}

}  // namespace distcomm::launcher
