/// A FIFO queue: O(1) amortised append and popFirst (an array with a moving head, compacted
/// when the consumed prefix dominates).
struct FIFOQueue<Element> {
    private var storage: [Element] = []
    private var head = 0

    init() {}

    var count: Int { self.storage.count - self.head }
    var isEmpty: Bool { self.head == self.storage.count }
    var first: Element? { self.head < self.storage.count ? self.storage[self.head] : nil }

    mutating func append(_ element: Element) {
        self.storage.append(element)
    }

    mutating func popFirst() -> Element? {
        guard self.head < self.storage.count else { return nil }
        let element = self.storage[self.head]
        self.head += 1
        if self.head == self.storage.count {
            self.storage.removeAll(keepingCapacity: true)
            self.head = 0
        } else if self.head >= 64, self.head * 2 >= self.storage.count {
            self.storage.removeFirst(self.head)
            self.head = 0
        }
        return element
    }
}
