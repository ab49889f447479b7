/// A growable FIFO ring buffer: O(1) push at the back and pop at the front.
///
/// Worker pools and the trampoline queue need a FIFO without Array's O(n) `removeFirst` and without
/// pulling swift-collections into TaskCore.
struct RingBuffer<Element> {
    private var storage: [Element?]
    private var head = 0
    private(set) var count = 0

    init(capacity: Int = 16) {
        self.storage = Array(repeating: nil, count: Swift.max(capacity, 4))
    }

    var isEmpty: Bool { self.count == 0 }

    /// The element `popFirst` would return.
    var first: Element? { self.count > 0 ? self.storage[self.head] : nil }

    mutating func append(_ element: Element) {
        if self.count == self.storage.count { self.grow() }
        var index = self.head + self.count
        if index >= self.storage.count { index -= self.storage.count }
        self.storage[index] = element
        self.count += 1
    }

    mutating func popFirst() -> Element? {
        guard self.count > 0 else { return nil }
        let element = self.storage[self.head].take()
        self.head += 1
        if self.head == self.storage.count { self.head = 0 }
        self.count -= 1
        return element
    }

    /// Removes every element for which `shouldRemove` is true, keeping the order of the rest.
    mutating func removeAll(where shouldRemove: (Element) -> Bool) {
        var kept = RingBuffer(capacity: self.storage.count)
        while let element = self.popFirst() {
            if !shouldRemove(element) { kept.append(element) }
        }
        self = kept
    }

    private mutating func grow() {
        var bigger = [Element?](repeating: nil, count: self.storage.count * 2)
        for i in 0..<self.count {
            var index = self.head + i
            if index >= self.storage.count { index -= self.storage.count }
            bigger[i] = self.storage[index].take()
        }
        self.storage = bigger
        self.head = 0
    }
}
