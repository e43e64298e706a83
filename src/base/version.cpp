// Version string of the library.
namespace chronos {
const char* version() { return "0.1.0"; }
}  // namespace chronos
