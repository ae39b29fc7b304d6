// SQLite's C API, for the benchmark's peer comparison only (Debian: libsqlite3-dev).
#include <sqlite3.h>
