/// Ten FIFO lanes, one per priority 0…9: `popFirst` takes the oldest element of the highest
/// non-empty lane (SPEC §8: higher priority first, first in first out within a priority).
///
/// The discipline of a pool's waiters and of a concurrency key's waiters. A bit per lane says which
/// are occupied, so taking the next element costs one bit scan, not a walk over ten lanes, and the
/// lanes are allocated on first use (a key that never has a waiter costs nothing here).
package struct PriorityFIFO<Element> {
    private var lanes: [RingBuffer<Element>] = []
    /// Bit `p` is set when lane `p` holds an element.
    private var occupied: UInt16 = 0
    package private(set) var count = 0

    package init() {}

    package var isEmpty: Bool { self.count == 0 }

    /// Appends `element` at the back of lane `priority` (clamped to 0…9).
    package mutating func append(_ element: Element, priority: Int) {
        if self.lanes.isEmpty { self.lanes = (0..<10).map { _ in RingBuffer(capacity: 4) } }
        let lane = Swift.min(Swift.max(priority, 0), 9)
        self.lanes[lane].append(element)
        self.occupied |= 1 << UInt16(lane)
        self.count += 1
    }

    /// The lane `popFirst` takes from next, or nil when empty.
    private var topLane: Int? {
        self.occupied == 0 ? nil : 15 - self.occupied.leadingZeroBitCount
    }

    /// The element `popFirst` would return.
    package var first: Element? {
        guard let lane = self.topLane else { return nil }
        return self.lanes[lane].first
    }

    /// Takes the oldest element of the highest non-empty lane.
    package mutating func popFirst() -> Element? {
        guard let lane = self.topLane else { return nil }
        let element = self.lanes[lane].popFirst()
        if self.lanes[lane].isEmpty { self.occupied &= ~(1 << UInt16(lane)) }
        self.count -= 1
        return element
    }

    /// Removes the first element of lane `priority` for which `matches` is true; whether one was.
    package mutating func removeFirst(priority: Int, where matches: (Element) -> Bool) -> Bool {
        let lane = Swift.min(Swift.max(priority, 0), 9)
        guard self.occupied & (1 << UInt16(lane)) != 0 else { return false }
        var removed = false
        self.lanes[lane].removeAll { element in
            if removed || !matches(element) { return false }
            removed = true
            return true
        }
        guard removed else { return false }
        if self.lanes[lane].isEmpty { self.occupied &= ~(1 << UInt16(lane)) }
        self.count -= 1
        return true
    }

    /// The number of elements per priority, index 0…9.
    package var countsByPriority: [Int] {
        self.lanes.isEmpty ? Array(repeating: 0, count: 10) : self.lanes.map(\.count)
    }
}
