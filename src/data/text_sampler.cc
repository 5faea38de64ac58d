// Implementation of the bottom-k line sample (see text_sampler.h).
#include "data/text_sampler.h"

#include <algorithm>
#include <queue>

#include "core/status_macros.h"
#include "data/utf8.h"

namespace rt::data {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Entry {
  uint64_t key;
  uint64_t index;
  std::string text;
  bool operator<(const Entry& o) const { return key < o.key; }  // max-heap on key
};

}  // namespace

absl::StatusOr<TextSample> SampleLines(const std::vector<InputFile>& files, uint64_t budget_bytes,
                                       uint64_t seed,
                                       const std::function<void(uint64_t, uint64_t)>& progress) {
  std::priority_queue<Entry> heap;
  uint64_t held = 0, index = 0, disk_done = 0, total = 0;
  for (const InputFile& f : files) total += f.disk_bytes;
  for (const InputFile& f : files) {
    ASSIGN_OR_RETURN(InputStream stream, InputStream::Open(f));
    LineReader reader(std::move(stream));
    LineReader::Line line;
    uint64_t n = 0;
    while (true) {
      ASSIGN_OR_RETURN(bool more, reader.Next(&line));
      if (!more) break;
      if (line.text.empty() || !IsValidUtf8(line.text)) continue;
      const uint64_t key = SplitMix64(seed ^ SplitMix64(index));
      const uint64_t my_index = index++;
      if (held + line.text.size() > budget_bytes && !heap.empty() && key >= heap.top().key) {
        continue;
      }
      if (line.text.size() > budget_bytes) continue;
      heap.push(Entry{key, my_index, std::string(line.text)});
      held += line.text.size();
      while (held > budget_bytes) {
        held -= heap.top().text.size();
        heap.pop();
      }
      if (progress && (++n & 4095) == 0) progress(disk_done + reader.disk_bytes_read(), total);
    }
    disk_done += reader.disk_bytes_read();
    if (progress) progress(disk_done, total);
  }
  std::vector<Entry> entries;
  entries.reserve(heap.size());
  while (!heap.empty()) {
    entries.push_back(std::move(const_cast<Entry&>(heap.top())));
    heap.pop();
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.index < b.index; });
  TextSample sample;
  sample.lines_seen = index;
  sample.bytes = held;
  for (Entry& e : entries) sample.lines.push_back(std::move(e.text));
  return sample;
}

}  // namespace rt::data
