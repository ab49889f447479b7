// libcurl and OpenSSL's libcrypto (libcurl's own TLS library, so no new runtime dependency) for
// TaskServer's outbound requests. curl_easy_setopt is variadic and unavailable in Swift: each
// option type we use gets a small typed inline wrapper here.
#ifndef TASKSERVER_CCURL_SHIM_H
#define TASKSERVER_CCURL_SHIM_H

#include <curl/curl.h>
#include <openssl/hmac.h>
#include <openssl/evp.h>

#endif
