package directory

import (
	"slices"

	"github.com/agentsilo/agentsilo/grain"
)

// SearchEntries searches an index of entries, for tests of the ranking.
func SearchEntries(entries []grain.DirectoryEntry, q grain.DirectoryQuery) []grain.DirectoryHit {
	entries = slices.Clone(entries)
	slices.SortFunc(entries, byKindName)
	limit := q.Limit
	if limit == 0 {
		limit = 20
	}
	return buildIndex(entries, 0).search(q, limit)
}
