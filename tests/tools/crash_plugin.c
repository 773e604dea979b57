// Stands in for a plugin that dies as soon as it is loaded, as one built for instructions this CPU
// lacks does: zipccl perf must name each side's crash by its signal, not report a hang.
#include <signal.h>

__attribute__((constructor)) static void die_at_load(void) {
  raise(SIGILL);
}
