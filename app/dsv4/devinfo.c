/* --device-info and the weight upload progress line. */
#include <unistd.h>

#include "cli.h"

void cli_upload_progress(void *user, uint64_t done, uint64_t total) {
    (void)user;
    if (!isatty(STDERR_FILENO)) return;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    fprintf(stderr, "\r\033[Kuploading weights to the device: %.2f / %.2f GiB", done / gib, total / gib);
    if (done >= total) fprintf(stderr, "\r\033[K");
    fflush(stderr);
}

int cli_device_info(dsv4_engine *e, uint32_t ctx) {
    dsv4_error err = {0};
    dsv4_session *s = NULL;
    if (dsv4_session_create(e, ctx, &s, &err) != DSV4_OK) {
        fprintf(stderr, "dsv4: cannot create a session of %u tokens: %s\n", ctx, err.msg);
        return 1;
    }
    dsv4_device_info di;
    const dsv4_status st = dsv4_engine_device_info(e, &di, &err);
    const size_t kv = dsv4_session_state_bytes(s);
    dsv4_session_free(s);
    if (st != DSV4_OK) {
        fprintf(stderr, "dsv4: device info: %s\n", err.msg);
        return 1;
    }
    const double mib = 1024.0 * 1024.0;
    printf("backend: %s\n", di.backend);
    printf("device: %d %s\n", di.device, di.name);
    if (di.cc_major) {
        printf("compute capability: %d.%d%s\n", di.cc_major, di.cc_minor,
               di.hopper ? " (Hopper paths enabled)" : "");
        printf("multiprocessors: %d\n", di.sm_count);
        printf("device memory: %.1f MiB total, %.1f MiB free\n", di.total_mem / mib, di.free_mem / mib);
    }
    printf("weights: %llu tensors, %.1f MiB resident\n", (unsigned long long)di.n_weights,
           di.weight_bytes / mib);
    printf("kv state: %zu bytes for %u tokens\n", kv, ctx);
    printf("buffers: %.1f MiB (graph workspace)\n", di.buffer_bytes / mib);
    printf("scratch: %.1f MiB\n", di.scratch_bytes / mib);
    return 0;
}
