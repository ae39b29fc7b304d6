import LedgerCluster
import LedgerCore
import Testing

@Suite("Placement: rendezvous hashing over the live members")
struct PlacementTests {
    let projects = (0..<200).map { try! ProjectID("project-\($0)") }

    @Test("each project gets `replicas` distinct holders, the same whatever order the members are listed in")
    func holdersAreStable() {
        let nodes = ["n1", "n2", "n3", "n4", "n5"]
        for project in projects {
            let holders = Placement.holders(of: project, among: nodes, replicas: 3)
            #expect(holders.count == 3)
            #expect(Set(holders).count == 3)
            #expect(Placement.holders(of: project, among: nodes.reversed(), replicas: 3) == holders)
        }
        #expect(Placement.holders(of: projects[0], among: ["n1", "n2"], replicas: 3).count == 2)
        #expect(Placement.holders(of: projects[0], among: nodes, replicas: 0).isEmpty)
    }

    @Test("a joining node takes only the projects it wins, each from one node; a leaving one gives up only its own")
    func joiningMovesOnlyWhatTheNewNodeWins() {
        let before = ["n1", "n2", "n3", "n4"]
        let after = before + ["n5"]
        var moved = 0
        for project in projects {
            let old = Set(Placement.holders(of: project, among: before, replicas: 3))
            let new = Set(Placement.holders(of: project, among: after, replicas: 3))
            if old == new { continue }
            moved += 1
            // The only change: n5 in, one old holder out.
            #expect(new.subtracting(old) == ["n5"])
            #expect(old.subtracting(new).count == 1)
            // Leaving again gives the project back to exactly the old holders.
            #expect(Set(Placement.holders(of: project, among: before, replicas: 3)) == old)
        }
        // About 3/5 of the projects have n5 among their three best of five.
        #expect((80...160).contains(moved), "\(moved) of 200 moved")
    }
}
