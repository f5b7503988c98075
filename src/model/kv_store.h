/* kv_store.h - moved to src/backend/cpu/kv_store.h (the CPU backend's paged KV store);
 * kept for includes outside the backend (tests/unit/test_grammar.c) until they move. */
#include "backend/cpu/kv_store.h"
