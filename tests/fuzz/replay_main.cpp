// The harnesses of this folder without libFuzzer, for builds by any compiler (the asan preset's
// gcc): every input file named (a folder: each file in it, sorted) runs once, then, for
// --seconds, inputs made by mutating them the way a simple fuzzer does (bytes flipped, set to
// edge values, inserted, erased, repeated; a file cut short; two inputs spliced) from a fixed
// --seed, so a run is reproducible. A harness finds a bug by crashing or aborting (ASan, UBSan,
// CHRONOS_FUZZ_CHECK); the input that did it is written to --crash-dir first. Coverage-guided
// runs are scripts/fuzz.sh's (clang, libFuzzer).
//   fuzz_NAME_replay [--seconds S] [--seed N] [--crash-dir DIR] PATH...
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "%s: cannot open\n", path.c_str());
    std::exit(2);
  }
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// The input about to run, saved where a crash leaves it for the regressions folder.
void save_current(const fs::path& crash_dir, const std::vector<uint8_t>& input) {
  if (crash_dir.empty()) return;
  std::ofstream out(crash_dir / "last-input", std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(input.data()), std::streamsize(input.size()));
}

void run(const fs::path& crash_dir, const std::vector<uint8_t>& input) {
  save_current(crash_dir, input);
  // An empty vector's data() may be null; libFuzzer passes a valid pointer with size 0.
  static const uint8_t empty = 0;
  LLVMFuzzerTestOneInput(input.empty() ? &empty : input.data(), input.size());
}

std::vector<uint8_t> mutate(std::vector<uint8_t> in, const std::vector<std::vector<uint8_t>>& seeds,
                            std::mt19937_64& rng) {
  const auto pick = [&](size_t n) { return n == 0 ? size_t(0) : size_t(rng() % n); };
  static const uint8_t kEdges[] = {0x00, 0x01, 0x7f, 0x80, 0xff, '"', '{', '}', '[', ']', ',', ':', '\\', '\n'};
  const int edits = 1 + int(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 7) {
      case 0:  // flip a bit
        if (!in.empty()) in[pick(in.size())] ^= uint8_t(1u << (rng() % 8));
        break;
      case 1:  // an edge value
        if (!in.empty()) in[pick(in.size())] = kEdges[pick(sizeof kEdges)];
        break;
      case 2:  // insert bytes
        in.insert(in.begin() + std::ptrdiff_t(pick(in.size() + 1)), 1 + pick(8), uint8_t(rng()));
        break;
      case 3: {  // erase a run
        if (in.empty()) break;
        const size_t at = pick(in.size());
        in.erase(in.begin() + std::ptrdiff_t(at), in.begin() + std::ptrdiff_t(std::min(in.size(), at + 1 + pick(16))));
        break;
      }
      case 4:  // cut short
        in.resize(pick(in.size() + 1));
        break;
      case 5: {  // repeat a run
        if (in.empty()) break;
        const size_t at = pick(in.size()), n = std::min(in.size() - at, 1 + pick(32));
        const std::vector<uint8_t> run(in.begin() + std::ptrdiff_t(at), in.begin() + std::ptrdiff_t(at + n));
        in.insert(in.begin() + std::ptrdiff_t(pick(in.size() + 1)), run.begin(), run.end());
        break;
      }
      default: {  // splice with another seed
        const std::vector<uint8_t>& other = seeds[pick(seeds.size())];
        const size_t keep = pick(in.size() + 1), from = pick(other.size() + 1);
        in.resize(keep);
        in.insert(in.end(), other.begin() + std::ptrdiff_t(from), other.end());
        break;
      }
    }
  }
  if (in.size() > (1u << 20)) in.resize(1u << 20);
  return in;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 0.0;
  uint64_t seed = 1;
  fs::path crash_dir;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--seconds" || arg == "--seed" || arg == "--crash-dir") && i + 1 < argc) {
      const char* value = argv[++i];
      if (arg == "--seconds") seconds = std::strtod(value, nullptr);
      if (arg == "--seed") seed = std::strtoull(value, nullptr, 10);
      if (arg == "--crash-dir") crash_dir = value;
      continue;
    }
    if (fs::is_directory(arg)) {
      std::vector<fs::path> found;
      for (const auto& entry : fs::directory_iterator(arg))
        if (entry.is_regular_file()) found.push_back(entry.path());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(arg);
    }
  }
  if (!crash_dir.empty()) fs::create_directories(crash_dir);
  std::vector<std::vector<uint8_t>> seeds;
  for (const fs::path& file : files) {
    seeds.push_back(read_bytes(file));
    run(crash_dir, seeds.back());
  }
  std::printf("replayed %zu inputs\n", seeds.size());
  if (seconds <= 0.0 || seeds.empty()) return 0;
  std::mt19937_64 rng(seed);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int64_t runs = 0;
  while (std::chrono::steady_clock::now() < end) {
    run(crash_dir, mutate(seeds[size_t(rng() % seeds.size())], seeds, rng));
    ++runs;
  }
  std::printf("ran %lld mutated inputs from seed %llu\n", static_cast<long long>(runs),
              static_cast<unsigned long long>(seed));
  return 0;
}
