/*
 * An in-memory stand-in for Mooncake's C API (mooncake-store/include/store_c.h), used only by
 * ts-l3's tests. It exports the same function names and C signatures as the real library, so
 * MooncakeStore binds it exactly as it binds libmooncake_store.so, and it adds test controls
 * (stub_*) that inject return codes, force short reads, produce malformed batch answers, move the
 * lease clock and count calls.
 *
 * Behaviour of the data path, per key, as the real client and master answer:
 *   put_from   create-only: 0 when created, and 0 again when the key is already present (the
 *              real client turns the master's OBJECT_ALREADY_EXISTS into success); the stored
 *              bytes are never replaced. -705 only when injected.
 *   get_into   the object's length when it fits the buffer (a larger buffer still answers the
 *              object's length), -704 (OBJECT_NOT_FOUND) when absent, -600 (INVALID_PARAMS)
 *              when the buffer is smaller than the object; nothing is copied then
 *   is_exist   1 or 0
 * Read leases: every get_into and is_exist (single or batch) that finds an object grants it a
 * read lease of lease_ttl_ms (default 10,000 ms, the master's default_kv_lease_ttl), extended,
 * never shortened, by a later grant. remove and remove_by_regex with force=0 skip leased objects
 * (remove answers -706 OBJECT_HAS_LEASE); force=1 removes them. remove_by_regex and remove_all
 * answer the number of objects removed. The lease clock is a test clock that only stub_advance_ms
 * moves, so a test expires leases deterministically and never sleeps.
 *
 * Payload buffers: with protocol "tcp" (the setup argument) any buffer is accepted, registered or
 * not, as the real TCP transport copies from any address. With any other protocol a row that
 * names a buffer outside every registration reports -800 (TRANSFER_FAIL) and touches nothing, as
 * the real RDMA transport fails a transfer from memory it has no registration for.
 * Objects live in one process-wide table shared by every handle, as a master's metadata is shared
 * by its clients; they do not outlive the process.
 *
 * The master's connection: the real client reaches the master through a pool of RPC connections,
 * one for every call it ran at once. A master restart leaves those connections stale: each fails
 * the next call made on it with RPC_FAIL (-900, every row of a batch, before any transfer) and is
 * then dropped, so the call after it opens a fresh connection to the new master. stub_master_stop
 * and stub_master_start(stale) model that: while the master is stopped every call that needs it
 * fails with -900; after the start, every client that existed keeps `stale` connections to the old
 * master, spent one per call. The new master has no metadata: every object was forgotten at the
 * stop.
 *
 * All state is guarded by one mutex; the stub is for correctness tests, not for speed.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <pthread.h>
#include <regex.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STUB_NO_AVAILABLE_HANDLE (-200)
#define STUB_INVALID_PARAMS (-600)
#define STUB_OBJECT_NOT_FOUND (-704)
#define STUB_OBJECT_ALREADY_EXISTS (-705)
#define STUB_OBJECT_HAS_LEASE (-706)
#define STUB_TRANSFER_FAIL (-800)
#define STUB_RPC_FAIL (-900)
#define STUB_HANDLE_MAGIC 0x4d4f4f4e43414b45ULL
#define STUB_DEFAULT_LEASE_TTL_MS 10000

typedef void *mooncake_store_t;

/* Opaque here: its layout differs between SDK releases, and the adapter always passes NULL. */
struct mooncake_replicate_config;

struct stub_handle {
  uint64_t magic;
  /* 1 after a setup with protocol "tcp": unregistered payload buffers are accepted. */
  int any_buffer;
  /* Like the real client's transfer listener: a TCP socket on every interface (0.0.0.0, an
   * ephemeral port) opened by a successful setup whatever local_hostname says, closed by
   * destroy; -1 before setup. */
  int listen_fd;
  /* Pooled connections to a master that was restarted: each fails one call, then is dropped. */
  int stale_connections;
  /* The live handles, newest first (stub_master_start reaches every client through it). */
  struct stub_handle *next;
};

struct stub_object {
  char *key;
  unsigned char *bytes;
  size_t length;
  /* The read lease ends at this lease-clock instant (milliseconds); 0 = never leased. */
  int64_t lease_until_ms;
};

struct stub_region {
  uintptr_t base;
  size_t length;
};

enum stub_fn {
  FN_CREATE,
  FN_DESTROY,
  FN_SETUP,
  FN_HEALTH_CHECK,
  FN_REGISTER_BUFFER,
  FN_UNREGISTER_BUFFER,
  FN_PUT_FROM,
  FN_BATCH_PUT_FROM,
  FN_GET_INTO,
  FN_BATCH_GET_INTO,
  FN_IS_EXIST,
  FN_BATCH_IS_EXIST,
  FN_REMOVE,
  FN_REMOVE_BY_REGEX,
  FN_REMOVE_ALL,
  FN_COUNT
};

static const char *const FN_NAMES[FN_COUNT] = {
    "create",         "destroy",        "setup",           "health_check",
    "register_buffer", "unregister_buffer", "put_from",     "batch_put_from",
    "get_into",       "batch_get_into", "is_exist",        "batch_is_exist",
    "remove",         "remove_by_regex", "remove_all"};

/* A scripted answer: the next `remaining` calls (or rows) answer `code`. */
struct stub_injection {
  int64_t code;
  int remaining;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct stub_object *objects;
static size_t object_count;
static size_t object_capacity;
static struct stub_region regions[16];
static size_t region_count;
static long calls[FN_COUNT];
static struct stub_injection call_injections[FN_COUNT];
static struct stub_injection row_injections[FN_COUNT];
static int malform_modes[FN_COUNT];
static int create_null_remaining;
static int short_read_remaining;
static int64_t short_read_shortfall;
static char last_setup[1024];
static int64_t lease_ttl_ms = STUB_DEFAULT_LEASE_TTL_MS;
static int64_t clock_ms;
static struct stub_handle *handles;
static int master_stopped;
static long stale_failures;

static int fn_index(const char *name) {
  if (name == NULL) {
    return -1;
  }
  for (int i = 0; i < FN_COUNT; i++) {
    if (strcmp(FN_NAMES[i], name) == 0) {
      return i;
    }
  }
  return -1;
}

static int valid_handle(mooncake_store_t store) {
  return store != NULL && ((struct stub_handle *)store)->magic == STUB_HANDLE_MAGIC;
}

static int any_buffer(mooncake_store_t store) {
  return ((struct stub_handle *)store)->any_buffer;
}

/*
 * Whether a call of this handle that needs the master fails with RPC_FAIL: the master is stopped,
 * or the call lands on a stale pooled connection, which it spends.
 */
static int master_unreachable(mooncake_store_t store) {
  struct stub_handle *handle = (struct stub_handle *)store;
  if (handle->stale_connections > 0) {
    handle->stale_connections--;
    stale_failures++;
    return 1;
  }
  return master_stopped;
}

/* Counts the call; returns 1 and sets *code when an injected top-level answer applies. */
static int enter(enum stub_fn fn, int64_t *code) {
  calls[fn]++;
  if (call_injections[fn].remaining > 0) {
    call_injections[fn].remaining--;
    *code = call_injections[fn].code;
    return 1;
  }
  return 0;
}

/* Returns 1 and sets *code when an injected per-row answer applies to the next row of fn. */
static int row_injected(enum stub_fn fn, int64_t *code) {
  if (row_injections[fn].remaining > 0) {
    row_injections[fn].remaining--;
    *code = row_injections[fn].code;
    return 1;
  }
  return 0;
}

static int take_malform(enum stub_fn fn) {
  int mode = malform_modes[fn];
  malform_modes[fn] = 0;
  return mode;
}

static struct stub_object *find(const char *key) {
  for (size_t i = 0; i < object_count; i++) {
    if (strcmp(objects[i].key, key) == 0) {
      return &objects[i];
    }
  }
  return NULL;
}

/* The lease clock, in milliseconds: it starts at 0 and moves only by stub_advance_ms. */
static int64_t now_ms(void) {
  return clock_ms;
}

static void grant_lease(struct stub_object *object) {
  int64_t until = now_ms() + lease_ttl_ms;
  if (until > object->lease_until_ms) {
    object->lease_until_ms = until;
  }
}

static int leased(const struct stub_object *object) {
  return object->lease_until_ms > now_ms();
}

/* Looks a key up as the master's GetReplicaList and ExistKey do: a hit grants a read lease. */
static struct stub_object *find_and_lease(const char *key) {
  struct stub_object *object = find(key);
  if (object != NULL) {
    grant_lease(object);
  }
  return object;
}

static void erase_at(size_t index) {
  free(objects[index].key);
  free(objects[index].bytes);
  objects[index] = objects[object_count - 1];
  object_count--;
}

static int inside_registered(const void *buffer, size_t size) {
  uintptr_t start = (uintptr_t)buffer;
  for (size_t i = 0; i < region_count; i++) {
    if (start >= regions[i].base && size <= regions[i].length &&
        start - regions[i].base <= regions[i].length - size) {
      return 1;
    }
  }
  return 0;
}

static int64_t put_one(int tcp, const char *key, const void *buffer, size_t size) {
  if (key == NULL || (buffer == NULL && size > 0)) {
    return STUB_INVALID_PARAMS;
  }
  if (!tcp && !inside_registered(buffer, size)) {
    return STUB_TRANSFER_FAIL;
  }
  if (find(key) != NULL) {
    return 0; /* create-only, and the real client reports the existing object as success */
  }
  if (object_count == object_capacity) {
    size_t capacity = object_capacity == 0 ? 64 : object_capacity * 2;
    struct stub_object *grown = realloc(objects, capacity * sizeof(*grown));
    if (grown == NULL) {
      return STUB_NO_AVAILABLE_HANDLE;
    }
    objects = grown;
    object_capacity = capacity;
  }
  struct stub_object *object = &objects[object_count];
  object->key = strdup(key);
  object->bytes = malloc(size == 0 ? 1 : size);
  if (object->key == NULL || object->bytes == NULL) {
    free(object->key);
    free(object->bytes);
    return STUB_NO_AVAILABLE_HANDLE;
  }
  memcpy(object->bytes, buffer, size);
  object->length = size;
  object->lease_until_ms = 0;
  object_count++;
  return 0;
}

/* The order of the real client: metadata (which grants the lease), buffer size, transfer. */
static int64_t get_one(int tcp, const char *key, void *buffer, size_t size) {
  if (key == NULL || (buffer == NULL && size > 0)) {
    return STUB_INVALID_PARAMS;
  }
  struct stub_object *object = find_and_lease(key);
  if (object == NULL) {
    return STUB_OBJECT_NOT_FOUND;
  }
  if (object->length > size) {
    return STUB_INVALID_PARAMS;
  }
  if (!tcp && !inside_registered(buffer, size)) {
    return STUB_TRANSFER_FAIL;
  }
  int64_t reported = (int64_t)object->length;
  size_t copied = object->length;
  if (short_read_remaining > 0) {
    short_read_remaining--;
    reported = (int64_t)object->length - short_read_shortfall;
    if (reported < 0) {
      reported = 0;
    }
    copied = (size_t)reported < object->length ? (size_t)reported : object->length;
  }
  memcpy(buffer, object->bytes, copied);
  return reported;
}

/* ---------------------------------------------------------------------------------------------
 * store_c.h
 * ------------------------------------------------------------------------------------------- */

/* A listening TCP socket bound to 0.0.0.0 on an ephemeral port, or -1. */
static int listen_on_every_interface(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    return -1;
  }
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 || listen(fd, 8) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

mooncake_store_t mooncake_store_create(void) {
  pthread_mutex_lock(&lock);
  calls[FN_CREATE]++;
  struct stub_handle *handle = NULL;
  if (create_null_remaining > 0) {
    create_null_remaining--;
  } else {
    handle = malloc(sizeof(*handle));
    if (handle != NULL) {
      handle->magic = STUB_HANDLE_MAGIC;
      handle->any_buffer = 0;
      handle->listen_fd = -1;
      handle->stale_connections = 0;
      handle->next = handles;
      handles = handle;
    }
  }
  pthread_mutex_unlock(&lock);
  return handle;
}

void mooncake_store_destroy(mooncake_store_t store) {
  pthread_mutex_lock(&lock);
  calls[FN_DESTROY]++;
  if (valid_handle(store)) {
    for (struct stub_handle **link = &handles; *link != NULL; link = &(*link)->next) {
      if (*link == (struct stub_handle *)store) {
        *link = (*link)->next;
        break;
      }
    }
    ((struct stub_handle *)store)->magic = 0;
    if (((struct stub_handle *)store)->listen_fd >= 0) {
      close(((struct stub_handle *)store)->listen_fd);
    }
    free(store);
  }
  pthread_mutex_unlock(&lock);
}

int mooncake_store_setup(mooncake_store_t store, const char *local_hostname,
                         const char *metadata_server, uint64_t global_segment_size,
                         uint64_t local_buffer_size, const char *protocol,
                         const char *device_name, const char *master_server_addr) {
  pthread_mutex_lock(&lock);
  int64_t code = 0;
  if (!enter(FN_SETUP, &code)) {
    code = valid_handle(store) && !master_stopped ? 0 : -1;
    if (code == 0) {
      ((struct stub_handle *)store)->any_buffer = protocol != NULL && strcmp(protocol, "tcp") == 0;
      if (((struct stub_handle *)store)->listen_fd < 0) {
        ((struct stub_handle *)store)->listen_fd = listen_on_every_interface();
      }
    }
    snprintf(last_setup, sizeof(last_setup), "%s|%s|%llu|%llu|%s|%s|%s",
             local_hostname ? local_hostname : "(null)",
             metadata_server ? metadata_server : "(null)",
             (unsigned long long)global_segment_size, (unsigned long long)local_buffer_size,
             protocol ? protocol : "(null)", device_name ? device_name : "(null)",
             master_server_addr ? master_server_addr : "(null)");
  }
  pthread_mutex_unlock(&lock);
  return (int)code;
}

int mooncake_store_health_check(mooncake_store_t store) {
  pthread_mutex_lock(&lock);
  int64_t code = 0;
  if (!enter(FN_HEALTH_CHECK, &code)) {
    code = valid_handle(store) ? 0 : -1;
  }
  pthread_mutex_unlock(&lock);
  return (int)code;
}

int mooncake_store_register_buffer(mooncake_store_t store, void *buffer, size_t size) {
  pthread_mutex_lock(&lock);
  int64_t code = 0;
  if (!enter(FN_REGISTER_BUFFER, &code)) {
    if (!valid_handle(store) || buffer == NULL || size == 0 ||
        region_count == sizeof(regions) / sizeof(regions[0])) {
      code = -1;
    } else {
      regions[region_count].base = (uintptr_t)buffer;
      regions[region_count].length = size;
      region_count++;
    }
  }
  pthread_mutex_unlock(&lock);
  return (int)code;
}

int mooncake_store_unregister_buffer(mooncake_store_t store, void *buffer) {
  pthread_mutex_lock(&lock);
  int64_t code = 0;
  if (!enter(FN_UNREGISTER_BUFFER, &code)) {
    code = -1;
    if (valid_handle(store)) {
      for (size_t i = 0; i < region_count; i++) {
        if (regions[i].base == (uintptr_t)buffer) {
          regions[i] = regions[region_count - 1];
          region_count--;
          code = 0;
          break;
        }
      }
    }
  }
  pthread_mutex_unlock(&lock);
  return (int)code;
}

int mooncake_store_put_from(mooncake_store_t store, const char *key, void *buffer, size_t size,
                            const struct mooncake_replicate_config *config) {
  (void)config;
  pthread_mutex_lock(&lock);
  int64_t code = 0;
  if (!enter(FN_PUT_FROM, &code)) {
    code = !valid_handle(store)          ? -1
           : master_unreachable(store) ? STUB_RPC_FAIL
                                       : put_one(any_buffer(store), key, buffer, size);
  }
  pthread_mutex_unlock(&lock);
  return (int)code;
}

/* Every row of a batch call the master could not answer: RPC_FAIL, before any transfer. */
static void fail_rows_int(int *results_out, size_t count) {
  for (size_t i = 0; i < count; i++) {
    results_out[i] = STUB_RPC_FAIL;
  }
}

/*
 * Malform modes, shared by the three batch functions (each arms one call):
 *   1  leave the last row of results_out unwritten
 *   2  also write one row past `count`
 *   3  write a value outside the documented set into row 0
 */
int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys, void **buffers,
                                  const size_t *sizes, size_t count,
                                  const struct mooncake_replicate_config *config,
                                  int *results_out) {
  (void)config;
  pthread_mutex_lock(&lock);
  int64_t code = 0;
  if (enter(FN_BATCH_PUT_FROM, &code)) {
    pthread_mutex_unlock(&lock);
    return (int)code;
  }
  if (!valid_handle(store) || keys == NULL || buffers == NULL || sizes == NULL ||
      results_out == NULL) {
    pthread_mutex_unlock(&lock);
    return -1;
  }
  if (master_unreachable(store)) {
    fail_rows_int(results_out, count);
    pthread_mutex_unlock(&lock);
    return 0;
  }
  int mode = take_malform(FN_BATCH_PUT_FROM);
  size_t rows = (mode == 1 && count > 0) ? count - 1 : count;
  for (size_t i = 0; i < rows; i++) {
    int64_t row = 0;
    if (!row_injected(FN_BATCH_PUT_FROM, &row)) {
      row = put_one(any_buffer(store), keys[i], buffers[i], sizes[i]);
    }
    results_out[i] = (int)row;
  }
  if (mode == 2) {
    results_out[count] = 0;
  } else if (mode == 3 && count > 0) {
    results_out[0] = 7;
  }
  pthread_mutex_unlock(&lock);
  return 0;
}

int64_t mooncake_store_get_into(mooncake_store_t store, const char *key, void *buffer,
                                size_t size) {
  pthread_mutex_lock(&lock);
  int64_t code = 0;
  if (!enter(FN_GET_INTO, &code)) {
    code = !valid_handle(store)          ? -1
           : master_unreachable(store) ? STUB_RPC_FAIL
                                       : get_one(any_buffer(store), key, buffer, size);
  }
  pthread_mutex_unlock(&lock);
  return code;
}

int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys, void **buffers,
                                  const size_t *sizes, size_t count, int64_t *results_out) {
  pthread_mutex_lock(&lock);
  int64_t code = 0;
  if (enter(FN_BATCH_GET_INTO, &code)) {
    pthread_mutex_unlock(&lock);
    return (int)code;
  }
  if (!valid_handle(store) || keys == NULL || buffers == NULL || sizes == NULL ||
      results_out == NULL) {
    pthread_mutex_unlock(&lock);
    return -1;
  }
  if (master_unreachable(store)) {
    for (size_t i = 0; i < count; i++) {
      results_out[i] = STUB_RPC_FAIL;
    }
    pthread_mutex_unlock(&lock);
    return 0;
  }
  int mode = take_malform(FN_BATCH_GET_INTO);
  size_t rows = (mode == 1 && count > 0) ? count - 1 : count;
  for (size_t i = 0; i < rows; i++) {
    int64_t row = 0;
    if (!row_injected(FN_BATCH_GET_INTO, &row)) {
      row = get_one(any_buffer(store), keys[i], buffers[i], sizes[i]);
    }
    results_out[i] = row;
  }
  if (mode == 2) {
    results_out[count] = 0;
  } else if (mode == 3 && count > 0) {
    results_out[0] = -((int64_t)1 << 40);
  }
  pthread_mutex_unlock(&lock);
  return 0;
}

int mooncake_store_is_exist(mooncake_store_t store, const char *key) {
  pthread_mutex_lock(&lock);
  int64_t code = 0;
  if (!enter(FN_IS_EXIST, &code)) {
    code = !(valid_handle(store) && key != NULL) ? -1
           : master_unreachable(store)         ? STUB_RPC_FAIL
                                               : (find_and_lease(key) != NULL);
  }
  pthread_mutex_unlock(&lock);
  return (int)code;
}

int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys, size_t count,
                                  int *results_out) {
  pthread_mutex_lock(&lock);
  int64_t code = 0;
  if (enter(FN_BATCH_IS_EXIST, &code)) {
    pthread_mutex_unlock(&lock);
    return (int)code;
  }
  if (!valid_handle(store) || keys == NULL || results_out == NULL) {
    pthread_mutex_unlock(&lock);
    return -1;
  }
  if (master_unreachable(store)) {
    fail_rows_int(results_out, count);
    pthread_mutex_unlock(&lock);
    return 0;
  }
  int mode = take_malform(FN_BATCH_IS_EXIST);
  size_t rows = (mode == 1 && count > 0) ? count - 1 : count;
  for (size_t i = 0; i < rows; i++) {
    int64_t row = 0;
    if (!row_injected(FN_BATCH_IS_EXIST, &row)) {
      row = keys[i] == NULL ? STUB_INVALID_PARAMS : (find_and_lease(keys[i]) != NULL);
    }
    results_out[i] = (int)row;
  }
  if (mode == 2) {
    results_out[count] = 1;
  } else if (mode == 3 && count > 0) {
    results_out[0] = 2;
  }
  pthread_mutex_unlock(&lock);
  return 0;
}

int mooncake_store_remove(mooncake_store_t store, const char *key, int force) {
  pthread_mutex_lock(&lock);
  int64_t code = 0;
  if (!enter(FN_REMOVE, &code)) {
    code = -1;
    if (valid_handle(store) && key != NULL && master_unreachable(store)) {
      code = STUB_RPC_FAIL;
    } else if (valid_handle(store) && key != NULL) {
      code = STUB_OBJECT_NOT_FOUND;
      for (size_t i = 0; i < object_count; i++) {
        if (strcmp(objects[i].key, key) == 0) {
          if (!force && leased(&objects[i])) {
            code = STUB_OBJECT_HAS_LEASE;
          } else {
            erase_at(i);
            code = 0;
          }
          break;
        }
      }
    }
  }
  pthread_mutex_unlock(&lock);
  return (int)code;
}

/*
 * POSIX extended expressions searched anywhere in the key, like the master's regex_search. With
 * force=0 a leased object is skipped and stays; the answer counts the objects removed.
 */
int64_t mooncake_store_remove_by_regex(mooncake_store_t store, const char *pattern, int force) {
  pthread_mutex_lock(&lock);
  int64_t code = 0;
  if (enter(FN_REMOVE_BY_REGEX, &code)) {
    pthread_mutex_unlock(&lock);
    return code;
  }
  if (!valid_handle(store) || pattern == NULL) {
    pthread_mutex_unlock(&lock);
    return -1;
  }
  if (master_unreachable(store)) {
    pthread_mutex_unlock(&lock);
    return STUB_RPC_FAIL;
  }
  regex_t compiled;
  if (regcomp(&compiled, pattern, REG_EXTENDED | REG_NOSUB) != 0) {
    pthread_mutex_unlock(&lock);
    return STUB_INVALID_PARAMS;
  }
  int64_t removed = 0;
  size_t i = 0;
  while (i < object_count) {
    if (regexec(&compiled, objects[i].key, 0, NULL, 0) == 0 && (force || !leased(&objects[i]))) {
      erase_at(i);
      removed++;
    } else {
      i++;
    }
  }
  regfree(&compiled);
  pthread_mutex_unlock(&lock);
  return removed;
}

int64_t mooncake_store_remove_all(mooncake_store_t store, int force) {
  pthread_mutex_lock(&lock);
  int64_t code = 0;
  if (!enter(FN_REMOVE_ALL, &code)) {
    code = -1;
    if (valid_handle(store) && master_unreachable(store)) {
      code = STUB_RPC_FAIL;
    } else if (valid_handle(store)) {
      code = 0;
      size_t i = 0;
      while (i < object_count) {
        if (force || !leased(&objects[i])) {
          erase_at(i);
          code++;
        } else {
          i++;
        }
      }
    }
  }
  pthread_mutex_unlock(&lock);
  return code;
}

/* ---------------------------------------------------------------------------------------------
 * Test controls
 * ------------------------------------------------------------------------------------------- */

/* Forgets every object, registration, scripted answer and counter. */
void stub_reset(void) {
  pthread_mutex_lock(&lock);
  while (object_count > 0) {
    erase_at(object_count - 1);
  }
  region_count = 0;
  memset(calls, 0, sizeof(calls));
  memset(call_injections, 0, sizeof(call_injections));
  memset(row_injections, 0, sizeof(row_injections));
  memset(malform_modes, 0, sizeof(malform_modes));
  create_null_remaining = 0;
  short_read_remaining = 0;
  short_read_shortfall = 0;
  last_setup[0] = '\0';
  lease_ttl_ms = STUB_DEFAULT_LEASE_TTL_MS;
  clock_ms = 0;
  master_stopped = 0;
  stale_failures = 0;
  for (struct stub_handle *h = handles; h != NULL; h = h->next) {
    h->stale_connections = 0;
  }
  pthread_mutex_unlock(&lock);
}

/*
 * The master stops: every later call that needs it fails with RPC_FAIL (-900), and setup fails,
 * until stub_master_start. Its metadata is lost: every object is forgotten.
 */
void stub_master_stop(void) {
  pthread_mutex_lock(&lock);
  master_stopped = 1;
  while (object_count > 0) {
    erase_at(object_count - 1);
  }
  pthread_mutex_unlock(&lock);
}

/*
 * A new master answers. Every client handle that exists now keeps `stale_connections` pooled
 * connections to the old master: each of its next that-many calls that need the master fails with
 * RPC_FAIL and drops one; later calls reach the new master. Handles created later have none.
 */
void stub_master_start(int stale_connections) {
  pthread_mutex_lock(&lock);
  master_stopped = 0;
  for (struct stub_handle *h = handles; h != NULL; h = h->next) {
    h->stale_connections = stale_connections < 0 ? 0 : stale_connections;
  }
  pthread_mutex_unlock(&lock);
}

/* Calls failed on a stale connection since the last reset. */
long stub_stale_failures(void) {
  pthread_mutex_lock(&lock);
  long failures = stale_failures;
  pthread_mutex_unlock(&lock);
  return failures;
}

/* Sets the read lease every later hit grants (default 10,000 ms); leases granted stay as they are. */
void stub_set_lease_ttl_ms(int64_t ttl_ms) {
  pthread_mutex_lock(&lock);
  lease_ttl_ms = ttl_ms < 0 ? 0 : ttl_ms;
  pthread_mutex_unlock(&lock);
}

/* Moves the lease clock forward by `ms` milliseconds. */
void stub_advance_ms(int64_t ms) {
  pthread_mutex_lock(&lock);
  clock_ms += ms < 0 ? 0 : ms;
  pthread_mutex_unlock(&lock);
}

/* Objects whose read lease has not ended. */
long stub_leased_count(void) {
  pthread_mutex_lock(&lock);
  long count = 0;
  for (size_t i = 0; i < object_count; i++) {
    count += leased(&objects[i]);
  }
  pthread_mutex_unlock(&lock);
  return count;
}

/* The next `count` calls of `fn` (a name without the mooncake_store_ prefix) return `code`. */
int stub_inject(const char *fn, int code, int count) {
  int index = fn_index(fn);
  if (index < 0) {
    return -1;
  }
  pthread_mutex_lock(&lock);
  call_injections[index].code = code;
  call_injections[index].remaining = count;
  pthread_mutex_unlock(&lock);
  return 0;
}

/* The next `count` rows of the batch function `fn` report `code` and touch nothing. */
int stub_inject_rows(const char *fn, int64_t code, int count) {
  int index = fn_index(fn);
  if (index < 0) {
    return -1;
  }
  pthread_mutex_lock(&lock);
  row_injections[index].code = code;
  row_injections[index].remaining = count;
  pthread_mutex_unlock(&lock);
  return 0;
}

/*
 * The next `count` successful reads report `shortfall_bytes` fewer bytes than the object holds
 * and copy only that many; a negative shortfall reports more bytes than the object holds.
 */
void stub_short_reads(int count, int64_t shortfall_bytes) {
  pthread_mutex_lock(&lock);
  short_read_remaining = count;
  short_read_shortfall = shortfall_bytes;
  pthread_mutex_unlock(&lock);
}

/* Arms one malformed answer (modes above) for the next call of the batch function `fn`. */
int stub_malform(const char *fn, int mode) {
  int index = fn_index(fn);
  if (index < 0) {
    return -1;
  }
  pthread_mutex_lock(&lock);
  malform_modes[index] = mode;
  pthread_mutex_unlock(&lock);
  return 0;
}

/* The next `count` calls of mooncake_store_create return NULL. */
void stub_create_null(int count) {
  pthread_mutex_lock(&lock);
  create_null_remaining = count;
  pthread_mutex_unlock(&lock);
}

/* Calls of `fn` since the last reset; "*" sums every function. -1 for an unknown name. */
long stub_calls(const char *fn) {
  long total = 0;
  pthread_mutex_lock(&lock);
  if (fn != NULL && strcmp(fn, "*") == 0) {
    for (int i = 0; i < FN_COUNT; i++) {
      total += calls[i];
    }
  } else {
    int index = fn_index(fn);
    total = index < 0 ? -1 : calls[index];
  }
  pthread_mutex_unlock(&lock);
  return total;
}

long stub_object_count(void) {
  pthread_mutex_lock(&lock);
  long count = (long)object_count;
  pthread_mutex_unlock(&lock);
  return count;
}

long stub_registered_count(void) {
  pthread_mutex_lock(&lock);
  long count = (long)region_count;
  pthread_mutex_unlock(&lock);
  return count;
}

/* 1 when an object with this exact key exists. */
int stub_has(const char *key) {
  pthread_mutex_lock(&lock);
  int present = key != NULL && find(key) != NULL;
  pthread_mutex_unlock(&lock);
  return present;
}

/* Copies "host|metadata|segment|buffer|protocol|device|master" of the last setup into buf. */
int stub_last_setup(char *buf, size_t buf_len) {
  if (buf == NULL || buf_len == 0) {
    return -1;
  }
  pthread_mutex_lock(&lock);
  snprintf(buf, buf_len, "%s", last_setup);
  pthread_mutex_unlock(&lock);
  return 0;
}
