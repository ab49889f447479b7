// libcurl for TaskServer's outbound requests (cryptography has its own module, CCrypto). curl_easy_setopt is variadic and unavailable in Swift: each
// option type we use gets a small typed inline wrapper here, and so do the macros Swift does not
// import (CURL_GLOBAL_DEFAULT, CURL_SOCKET_BAD, …).
#ifndef TASKSERVER_CCURL_SHIM_H
#define TASKSERVER_CCURL_SHIM_H

#include <curl/curl.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

// MARK: - Global state and constants

static inline CURLcode ts_curl_global_init(void) { return curl_global_init(CURL_GLOBAL_DEFAULT); }
static inline curl_socket_t ts_curl_socket_bad(void) { return CURL_SOCKET_BAD; }
static inline int ts_curl_error_size(void) { return CURL_ERROR_SIZE; }

// MARK: - Easy options, one wrapper per argument type

static inline CURLcode ts_easy_setopt_long(CURL *easy, CURLoption option, long value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode ts_easy_setopt_off_t(CURL *easy, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(easy, option, value);
}
/// Strings are copied by libcurl (every string option since 7.17.0), except CURLOPT_POSTFIELDS.
static inline CURLcode ts_easy_setopt_string(CURL *easy, CURLoption option, const char *value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode ts_easy_setopt_pointer(CURL *easy, CURLoption option, void *value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode ts_easy_setopt_slist(CURL *easy, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode ts_easy_setopt_write_function(CURL *easy, CURLoption option, curl_write_callback value) {
    return curl_easy_setopt(easy, option, value);
}
static inline CURLcode ts_easy_setopt_opensocket_function(CURL *easy, curl_opensocket_callback value) {
    return curl_easy_setopt(easy, CURLOPT_OPENSOCKETFUNCTION, value);
}

static inline CURLcode ts_easy_getinfo_long(CURL *easy, CURLINFO info, long *value) {
    return curl_easy_getinfo(easy, info, value);
}
static inline CURLcode ts_easy_getinfo_pointer(CURL *easy, CURLINFO info, void **value) {
    return curl_easy_getinfo(easy, info, value);
}

// MARK: - Multi options

static inline CURLMcode ts_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return curl_multi_setopt(multi, option, value);
}

/// The CURLcode of a CURLMSG_DONE message (a member of an anonymous union in C).
static inline CURLcode ts_msg_result(const CURLMsg *message) { return message->data.result; }

// MARK: - Socket addresses (for the opensocket callback's address policy)

/// Copies the raw address of `address` into `out` (16 bytes of room); returns 4 (IPv4), 16 (IPv6)
/// or 0 (another family). `curl_sockaddr.addr` is declared as a `struct sockaddr` but is backed by
/// storage large enough for the family's own struct.
static inline int ts_sockaddr_address(const struct curl_sockaddr *address, unsigned char *out) {
    if (address->family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)&address->addr;
        memcpy(out, &in->sin_addr, 4);
        return 4;
    }
    if (address->family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)&address->addr;
        memcpy(out, &in6->sin6_addr, 16);
        return 16;
    }
    return 0;
}

/// Opens the socket libcurl asked for, close-on-exec so child processes never inherit it.
static inline curl_socket_t ts_open_socket(const struct curl_sockaddr *address) {
    return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

#endif
