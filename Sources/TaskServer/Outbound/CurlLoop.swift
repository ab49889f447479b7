import CCurl
import Synchronization
import TaskCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// One transfer in progress: the easy handle's options point at it (`CURLOPT_PRIVATE`, the
/// callbacks' data), so it lives in `CurlLoop.active` until the handle is removed.
///
/// Confined to the client's thread: libcurl calls the callbacks on the thread that drives the
/// multi handle, which is the only thread that touches a `Transfer`.
final class Transfer {
    let pending: PendingTransfer
    let easy: UnsafeMutableRawPointer
    let maxResponseBytes: Int
    let policy: AddressPolicy
    var headerList: UnsafeMutablePointer<curl_slist>?
    let errorBuffer: UnsafeMutablePointer<CChar>
    var body: [UInt8] = []
    var headers: [(name: String, value: String)] = []
    var isTooLarge = false
    /// The last address the policy refused, and the rule that refused it.
    var refused: (address: String, rule: String)?

    init(pending: PendingTransfer, easy: UnsafeMutableRawPointer, maxResponseBytes: Int, policy: AddressPolicy) {
        self.pending = pending
        self.easy = easy
        self.maxResponseBytes = maxResponseBytes
        self.policy = policy
        let size = Int(ts_curl_error_size())
        self.errorBuffer = .allocate(capacity: size)
        self.errorBuffer.initialize(repeating: 0, count: size)
    }

    deinit {
        if let headerList { curl_slist_free_all(headerList) }
        self.errorBuffer.deallocate()
    }

    var errorText: String {
        let text = String(cString: self.errorBuffer)
        return text.isEmpty ? "" : text
    }

    /// One header line from libcurl (status lines included, CRLF at the end).
    func receiveHeaderLine(_ line: UnsafeRawBufferPointer) {
        var bytes = line[...]
        while let last = bytes.last, last == 0x0D || last == 0x0A { bytes = bytes.dropLast() }
        if bytes.starts(with: Array("HTTP/".utf8)) {
            // A new response (after a 100 Continue or a followed redirect): only the last one counts.
            self.headers = []
            return
        }
        if bytes.isEmpty { return }
        if bytes.first == 0x20 || bytes.first == 0x09, !self.headers.isEmpty {
            // obs-fold: a continuation of the previous field's value.
            let extra = String(decoding: bytes.drop { $0 == 0x20 || $0 == 0x09 }, as: UTF8.self)
            self.headers[self.headers.count - 1].value += " " + extra
            return
        }
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")) else { return }
        let name = String(decoding: bytes[bytes.startIndex..<colon], as: UTF8.self)
        var value = bytes[(colon + 1)...]
        while let first = value.first, first == 0x20 || first == 0x09 { value = value.dropFirst() }
        while let last = value.last, last == 0x20 || last == 0x09 { value = value.dropLast() }
        self.headers.append((name, String(decoding: value, as: UTF8.self)))
    }
}

// MARK: - libcurl callbacks (C function pointers; context through the data pointers)

private let writeBody: curl_write_callback = { data, size, count, userdata in
    let transfer = Unmanaged<Transfer>.fromOpaque(userdata!).takeUnretainedValue()
    let length = size * count
    if transfer.body.count + length > transfer.maxResponseBytes {
        transfer.isTooLarge = true
        return 0  // CURLE_WRITE_ERROR: aborts the transfer
    }
    if let data, length > 0 { transfer.body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: length)) }
    return length
}

private let writeHeader: curl_write_callback = { data, size, count, userdata in
    let transfer = Unmanaged<Transfer>.fromOpaque(userdata!).takeUnretainedValue()
    let length = size * count
    if let data { transfer.receiveHeaderLine(UnsafeRawBufferPointer(start: data, count: length)) }
    return length
}

private let openSocket: curl_opensocket_callback = { clientp, purpose, address in
    guard let clientp, let address else { return ts_curl_socket_bad() }
    let transfer = Unmanaged<Transfer>.fromOpaque(clientp).takeUnretainedValue()
    var raw = [UInt8](repeating: 0, count: 16)
    let length = Int(raw.withUnsafeMutableBufferPointer { ts_sockaddr_address(address, $0.baseAddress) })
    guard length == 4 || length == 16 else { return ts_curl_socket_bad() }
    let bytes = Array(raw.prefix(length))
    if case .denied(let rule) = transfer.policy.decision(for: bytes) {
        transfer.refused = (IPAddress.format(bytes), rule)
        return ts_curl_socket_bad()  // libcurl then tries the next address, or fails with CURLE_COULDNT_CONNECT
    }
    return ts_open_socket(address)
}

// MARK: - The client's thread

/// The client's event loop; lives on (and only on) the client's thread.
final class CurlLoop {
    let core: CurlCore
    let multi: UnsafeMutableRawPointer
    let maxActive: Int
    /// Requests waiting for a transfer slot, FIFO (`queueHead` is the first live index).
    var queue: [PendingTransfer] = []
    var queueHead = 0
    var active: [UInt64: Transfer] = [:]
    var idleHandles: [UnsafeMutableRawPointer] = []
    /// Promises to complete once the loop's bookkeeping for this round is done.
    var completions: [(Promise<OutboundResponse>, Outcome<OutboundResponse>)] = []
    var lastQueueScan: UInt64 = 0

    init(core: CurlCore) {
        self.core = core
        self.multi = core.multi.pointer
        self.maxActive = core.configuration.maxConcurrentTransfers
    }

    var queuedCount: Int { self.queue.count - self.queueHead }

    func run() {
        while true {
            let (requests, cancellations, isShutdown) = self.core.inbox.withLock { inbox in
                inbox.isWakeupPending = false
                defer {
                    inbox.requests.removeAll(keepingCapacity: true)
                    inbox.cancellations.removeAll(keepingCapacity: true)
                }
                return (inbox.requests, inbox.cancellations, inbox.isShutdown)
            }
            if isShutdown {
                self.close(also: requests)
                return
            }
            self.queue.append(contentsOf: requests)
            for id in cancellations { self.cancel(id) }
            self.startQueued()

            var running: Int32 = 0
            curl_multi_perform(self.multi, &running)
            self.collectFinished()
            self.startQueued()
            self.publishCounts()
            self.completeAll()

            var timeout: Int32 = 1000
            if self.queuedCount > 0 {
                self.expireQueued()
                timeout = 100  // queued requests' deadlines are checked ten times a second
            }
            curl_multi_poll(self.multi, nil, 0, timeout, nil)
        }
    }

    // MARK: Starting

    /// Moves requests from the queue into transfers while there is room.
    private func startQueued() {
        while self.active.count < self.maxActive, self.queueHead < self.queue.count {
            let pending = self.queue[self.queueHead]
            self.queueHead += 1
            self.start(pending)
        }
        if self.queueHead > 1024, self.queueHead * 2 > self.queue.count {
            self.queue.removeFirst(self.queueHead)
            self.queueHead = 0
        } else if self.queueHead == self.queue.count {
            self.queue.removeAll(keepingCapacity: true)
            self.queueHead = 0
        }
    }

    private func start(_ pending: PendingTransfer) {
        let now = monotonicNanoseconds()
        guard now < pending.deadline else {
            self.finishTimedOutInQueue(pending)
            return
        }
        guard let easy = self.idleHandles.popLast() ?? curl_easy_init() else {
            self.finish(pending, .failure(OutboundError(.other, "curl_easy_init failed")))
            return
        }
        let transfer = Transfer(
            pending: pending,
            easy: easy,
            maxResponseBytes: pending.request.maxResponseBytes ?? self.core.configuration.maxResponseBytes,
            policy: self.core.configuration.policy
        )
        if let problem = self.configure(transfer, remainingMilliseconds: Int((pending.deadline - now) / 1_000_000)) {
            self.recycle(easy)
            self.finish(pending, .failure(problem))
            return
        }
        let code = curl_multi_add_handle(self.multi, easy)
        guard code == CURLM_OK else {
            self.recycle(easy)
            self.finish(pending, .failure(OutboundError(.other, "curl_multi_add_handle failed (\(code.rawValue))")))
            return
        }
        self.active[pending.id] = transfer
    }

    /// Sets the easy handle's options for `transfer`; returns a problem when the request is unusable.
    private func configure(_ transfer: Transfer, remainingMilliseconds: Int) -> OutboundError? {
        let easy = transfer.easy
        let request = transfer.pending.request
        let context = Unmanaged.passUnretained(transfer).toOpaque()
        var failed: CURLcode = CURLE_OK
        func check(_ code: CURLcode) { if code != CURLE_OK, failed == CURLE_OK { failed = code } }

        check(ts_easy_setopt_string(easy, CURLOPT_URL, request.url))
        check(ts_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1))
        check(ts_easy_setopt_string(easy, CURLOPT_PROTOCOLS_STR, "http,https"))
        check(ts_easy_setopt_string(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https"))
        check(ts_easy_setopt_long(easy, CURLOPT_FOLLOWLOCATION, request.followRedirects ? 1 : 0))
        check(ts_easy_setopt_long(easy, CURLOPT_MAXREDIRS, 5))
        check(ts_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, max(1, remainingMilliseconds)))
        check(ts_easy_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 1))
        check(ts_easy_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 2))
        if let caFile = self.core.configuration.caFile { check(ts_easy_setopt_string(easy, CURLOPT_CAINFO, caFile)) }
        // No proxy, whatever the environment says: the address policy must see the real peer.
        check(ts_easy_setopt_string(easy, CURLOPT_PROXY, ""))
        check(ts_easy_setopt_string(easy, CURLOPT_USERAGENT, self.core.configuration.userAgent))
        check(ts_easy_setopt_off_t(easy, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(transfer.maxResponseBytes)))
        check(ts_easy_setopt_pointer(easy, CURLOPT_PRIVATE, context))
        check(ts_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, UnsafeMutableRawPointer(transfer.errorBuffer)))
        check(ts_easy_setopt_write_function(easy, CURLOPT_WRITEFUNCTION, writeBody))
        check(ts_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, context))
        check(ts_easy_setopt_write_function(easy, CURLOPT_HEADERFUNCTION, writeHeader))
        check(ts_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, context))
        check(ts_easy_setopt_opensocket_function(easy, openSocket))
        check(ts_easy_setopt_pointer(easy, CURLOPT_OPENSOCKETDATA, context))

        // Method and body.
        let method = request.method
        switch (method, request.body) {
        case ("GET", nil):
            check(ts_easy_setopt_long(easy, CURLOPT_HTTPGET, 1))
        case ("HEAD", nil):
            check(ts_easy_setopt_long(easy, CURLOPT_NOBODY, 1))
        default:
            if method != "POST" { check(ts_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, method)) }
            if method == "POST" || request.body != nil {
                let body = request.body ?? []
                check(ts_easy_setopt_off_t(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count)))
                // COPYPOSTFIELDS copies the bytes, so they need not outlive this call.
                check(
                    body.withUnsafeBytes { raw in
                        ts_easy_setopt_pointer(
                            easy,
                            CURLOPT_COPYPOSTFIELDS,
                            UnsafeMutableRawPointer(mutating: raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!)
                        )
                    }
                )
            }
        }

        // Headers: reject CR/LF/NUL (header injection); disable libcurl's own `Expect:
        // 100-continue` (a second round trip for bodies over 1 KiB) and its form content type.
        var list: UnsafeMutablePointer<curl_slist>?
        var hasContentType = false
        var hasExpect = false
        for (name, value) in request.headers {
            guard HTTPSyntax.isHeaderName(name) else {
                return OutboundError(.invalidRequest, "invalid header name \"\(name.prefix(100))\"")
            }
            guard !value.utf8.contains(where: { $0 == 0x0D || $0 == 0x0A || $0 == 0 }) else {
                return OutboundError(.invalidRequest, "the value of header \(name) contains CR, LF or NUL")
            }
            let lower = name.lowercasedASCII
            if lower == "content-type" { hasContentType = true }
            if lower == "expect" { hasExpect = true }
            // "Name;" is libcurl's syntax for a header with an empty value ("Name:" would remove it).
            let line = value.isEmpty ? "\(name);" : "\(name): \(value)"
            list = curl_slist_append(list, line)
        }
        if !hasExpect { list = curl_slist_append(list, "Expect:") }
        if request.body != nil, !hasContentType { list = curl_slist_append(list, "Content-Type:") }
        transfer.headerList = list
        check(ts_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, list))

        if failed == CURLE_OK { return nil }
        let reason = String(cString: curl_easy_strerror(failed))
        if failed == CURLE_URL_MALFORMAT || failed == CURLE_UNSUPPORTED_PROTOCOL {
            return OutboundError(
                .invalidRequest,
                "the request cannot be sent: \(reason)",
                curlCode: Int(failed.rawValue)
            )
        }
        return OutboundError(.other, "the request cannot be sent: \(reason)", curlCode: Int(failed.rawValue))
    }

    // MARK: Finishing

    /// Reads libcurl's completion messages and finishes those transfers.
    private func collectFinished() {
        var remaining: Int32 = 0
        while let message = curl_multi_info_read(self.multi, &remaining) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let code = ts_msg_result(message)
            var raw: UnsafeMutableRawPointer?
            ts_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &raw)
            guard let raw else { continue }
            let transfer = Unmanaged<Transfer>.fromOpaque(raw).takeUnretainedValue()
            let outcome = self.outcome(of: transfer, code: code)
            curl_multi_remove_handle(self.multi, easy)
            self.active[transfer.pending.id] = nil
            self.recycle(easy)
            self.finish(transfer.pending, outcome)
        }
    }

    private func outcome(of transfer: Transfer, code: CURLcode) -> Outcome<OutboundResponse> {
        let request = transfer.pending.request
        let duration = Duration.nanoseconds(Int64(monotonicNanoseconds() - transfer.pending.start))
        let detail = transfer.errorText.isEmpty ? String(cString: curl_easy_strerror(code)) : transfer.errorText
        let curlCode = Int(code.rawValue)
        switch code {
        case CURLE_OK:
            var status = 0
            ts_easy_getinfo_long(transfer.easy, CURLINFO_RESPONSE_CODE, &status)
            return .success(
                OutboundResponse(status: status, headers: transfer.headers, body: transfer.body, duration: duration)
            )
        case CURLE_OPERATION_TIMEDOUT:
            return .failure(
                OutboundError(.timeout, "no response within \(request.timeout): \(detail)", curlCode: curlCode)
            )
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST:
            if code == CURLE_COULDNT_CONNECT, let refused = transfer.refused {
                return .failure(
                    OutboundError(
                        .refusedByPolicy,
                        "refused to connect to \(refused.address): the outbound address policy denies it (\(refused.rule))",
                        address: refused.address,
                        curlCode: curlCode
                    )
                )
            }
            return .failure(OutboundError(.connect, "cannot connect: \(detail)", curlCode: curlCode))
        case CURLE_WRITE_ERROR where transfer.isTooLarge, CURLE_FILESIZE_EXCEEDED:
            return .failure(
                OutboundError(
                    .responseTooLarge,
                    "the response body exceeds \(transfer.maxResponseBytes) bytes; the transfer was aborted",
                    curlCode: curlCode
                )
            )
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL:
            return .failure(OutboundError(.invalidRequest, "the request cannot be sent: \(detail)", curlCode: curlCode))
        default:
            return .failure(OutboundError(.other, detail, curlCode: curlCode))
        }
    }

    /// Aborts request `id`: a running transfer is removed from the multi handle (its connection is
    /// closed), a queued one dropped. Unknown ids (already finished) are ignored.
    private func cancel(_ id: UInt64) {
        if let transfer = self.active.removeValue(forKey: id) {
            curl_multi_remove_handle(self.multi, transfer.easy)
            self.recycle(transfer.easy)
            self.finish(transfer.pending, .cancelled)
            return
        }
        if let index = self.queue[self.queueHead...].firstIndex(where: { $0.id == id }) {
            let pending = self.queue.remove(at: index)
            self.finish(pending, .cancelled)
        }
    }

    /// Fails queued requests whose deadline passed (at most ten times a second).
    private func expireQueued() {
        let now = monotonicNanoseconds()
        guard now &- self.lastQueueScan >= 100_000_000 else { return }
        self.lastQueueScan = now
        var kept: [PendingTransfer] = []
        kept.reserveCapacity(self.queuedCount)
        for pending in self.queue[self.queueHead...] {
            if pending.deadline <= now {
                self.finishTimedOutInQueue(pending)
            } else {
                kept.append(pending)
            }
        }
        self.queue = kept
        self.queueHead = 0
        self.publishCounts()
        self.completeAll()
    }

    /// Fails a transfer whose deadline passed while it waited for a free connection.
    private func finishTimedOutInQueue(_ pending: PendingTransfer) {
        let message = "no response within \(pending.request.timeout) (the request waited for a free connection)"
        self.finish(pending, .failure(OutboundError(.timeout, message)))
    }

    private func finish(_ pending: PendingTransfer, _ outcome: Outcome<OutboundResponse>) {
        self.completions.append((pending.promise, outcome))
    }

    /// Completes the collected promises, outside any lock and after the bookkeeping, so the
    /// continuations that run inline (and may send new requests) see a consistent loop.
    private func completeAll() {
        guard !self.completions.isEmpty else { return }
        let batch = self.completions
        self.completions.removeAll(keepingCapacity: true)
        self.core.completedCount.add(batch.count, ordering: .relaxed)
        for (promise, outcome) in batch { promise.tryComplete(with: outcome) }
    }

    private func publishCounts() {
        self.core.activeCount.store(self.active.count, ordering: .relaxed)
        self.core.queuedCount.store(self.queuedCount, ordering: .relaxed)
    }

    /// Resets an easy handle and keeps it for the next transfer (its DNS cache entries and the
    /// multi handle's connections stay), or frees it when enough are kept.
    private func recycle(_ easy: UnsafeMutableRawPointer) {
        if self.idleHandles.count < self.maxActive {
            curl_easy_reset(easy)
            self.idleHandles.append(easy)
        } else {
            curl_easy_cleanup(easy)
        }
    }

    /// Shutdown: every request still here fails with `.shutdown`; libcurl's handles are freed.
    private func close(also requests: [PendingTransfer]) {
        let error = OutboundError(.shutdown, "the HTTP client was shut down")
        for transfer in self.active.values {
            curl_multi_remove_handle(self.multi, transfer.easy)
            curl_easy_cleanup(transfer.easy)
            self.finish(transfer.pending, .failure(error))
        }
        self.active = [:]
        for pending in self.queue[self.queueHead...] { self.finish(pending, .failure(error)) }
        for pending in requests { self.finish(pending, .failure(error)) }
        self.queue = []
        self.queueHead = 0
        for easy in self.idleHandles { curl_easy_cleanup(easy) }
        self.idleHandles = []
        curl_multi_cleanup(self.multi)
        self.publishCounts()
        self.completeAll()
    }
}
