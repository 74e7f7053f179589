/*
 * For measuring only; not part of the library. Loaded with LD_PRELOAD by scripts/soak-without-foundation-leak.sh.
 *
 * swift-corelibs-foundation (FoundationNetworking on Linux, Swift 5.10 through 6.3.1 at least) checks every
 * transfer's host with CFURLSessionCurlHostIsEqual, which parses the URL into a libcurl URL handle and then
 * frees the handle with curl_free() instead of curl_url_cleanup(): the parsed scheme, host, port, path and query
 * stay allocated, about 200 bytes of heap per request, for the life of the process. This file defines the same
 * function with the handle cleaned up; the dynamic linker prefers it to FoundationNetworking's. The libcurl
 * functions are looked up at run time so that no curl headers are needed to build it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

enum { PART_URL = 0, PART_HOST = 5 }; /* CURLUPART_URL, CURLUPART_HOST */

static void *(*url_new)(void);
static void (*url_cleanup)(void *);
static int (*url_set)(void *, int, const char *, unsigned int);
static int (*url_get)(void *, int, char **, unsigned int);
static void (*curl_release)(void *);
static pthread_once_t resolved = PTHREAD_ONCE_INIT;

static void resolve(void) {
    url_new = (void *(*)(void))dlsym(RTLD_DEFAULT, "curl_url");
    url_cleanup = (void (*)(void *))dlsym(RTLD_DEFAULT, "curl_url_cleanup");
    url_set = (int (*)(void *, int, const char *, unsigned int))dlsym(RTLD_DEFAULT, "curl_url_set");
    url_get = (int (*)(void *, int, char **, unsigned int))dlsym(RTLD_DEFAULT, "curl_url_get");
    curl_release = (void (*)(void *))dlsym(RTLD_DEFAULT, "curl_free");
}

/* Present so that requests-bench can tell that the fix is loaded. */
int requests_curlu_leak_fix_loaded(void) { return 1; }

bool CFURLSessionCurlHostIsEqual(const char *url, const char *expectedHost) {
    pthread_once(&resolved, resolve);
    /* Without libcurl's URL API the host cannot be checked: refuse, as a failed parse does. */
    if (!url_new || !url_cleanup || !url_set || !url_get || !curl_release) return false;
    bool isEqual = false;
    void *handle = url_new();
    if (!handle) return false;
    char *host = NULL;
    if (url_set(handle, PART_URL, url, 0) == 0 && url_get(handle, PART_HOST, &host, 0) == 0) {
        isEqual = strcmp(host, expectedHost) == 0;
        curl_release(host);
    }
    url_cleanup(handle);
    return isEqual;
}
