// StopMatcher: generated text held back while it might be the start of a stop string (generate
// and the batch generator).
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chronos {

// Holds back generated text that might be the start of a stop string.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Appends text; returns what can be emitted now. Sets `stopped` when a stop string appeared
  // (the text before it is returned, the rest dropped).
  std::string push(std::string_view text, bool& stopped) {
    pending_ += text;
    for (const std::string& stop : stops_) {
      const size_t at = stop.empty() ? std::string::npos : pending_.find(stop);
      if (at != std::string::npos) {
        stopped = true;
        std::string out = pending_.substr(0, at);
        pending_.clear();
        return out;
      }
    }
    // Keep the longest suffix that is a proper prefix of some stop string.
    size_t hold = 0;
    for (const std::string& stop : stops_)
      for (size_t len = std::min(stop.size() - (stop.empty() ? 0 : 1), pending_.size()); len > hold; --len)
        if (pending_.compare(pending_.size() - len, len, stop, 0, len) == 0) {
          hold = len;
          break;
        }
    std::string out = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return out;
  }
  std::string flush() { return std::exchange(pending_, {}); }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
};

}  // namespace chronos
