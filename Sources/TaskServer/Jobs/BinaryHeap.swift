/// A min-heap: `push` and `popMin` in O(log n), the least element first (ties in no set order).
struct BinaryHeap<Element: Comparable> {
    private(set) var elements: [Element] = []

    var count: Int { self.elements.count }
    var isEmpty: Bool { self.elements.isEmpty }
    var min: Element? { self.elements.first }

    mutating func push(_ element: Element) {
        self.elements.append(element)
        var child = self.elements.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard self.elements[child] < self.elements[parent] else { break }
            self.elements.swapAt(child, parent)
            child = parent
        }
    }

    mutating func popMin() -> Element? {
        guard !self.elements.isEmpty else { return nil }
        self.elements.swapAt(0, self.elements.count - 1)
        let min = self.elements.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1
            guard left < self.elements.count else { break }
            let right = left + 1
            let child = right < self.elements.count && self.elements[right] < self.elements[left] ? right : left
            guard self.elements[child] < self.elements[parent] else { break }
            self.elements.swapAt(child, parent)
            parent = child
        }
        return min
    }
}
