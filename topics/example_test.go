package topics_test

import (
	"fmt"

	"github.com/agentsilo/agentsilo/topics"
)

func ExamplePattern_Match() {
	// A relative name or pattern belongs to the sender's owner.
	p, err := topics.ParsePattern("orders.*.eu", "acme")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range []string{"orders.created.eu", "orders.created.us", "orders.eu", "globex:orders.created.eu"} {
		t, err := topics.ParseTopic(s, "acme")
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s matches %s: %v\n", p, t, p.Match(t))
	}
	// `#` takes zero or more segments.
	fmt.Println(topics.MatchName("orders.#", "orders"), topics.MatchName("orders.#", "orders.created.eu"))
	// A segment may not be empty.
	_, err = topics.ParseTopic("orders..eu", "acme")
	fmt.Println(err != nil)
	// Output:
	// acme:orders.*.eu matches acme:orders.created.eu: true
	// acme:orders.*.eu matches acme:orders.created.us: false
	// acme:orders.*.eu matches acme:orders.eu: false
	// acme:orders.*.eu matches globex:orders.created.eu: false
	// true true
	// true
}
