package auth_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log"
	"net/http/httptest"

	"google.golang.org/grpc/status"

	"github.com/agentsilo/agentsilo/auth"
)

// A server with one API key proves its callers by it; a wrong key is
// Unauthenticated.
func ExampleAuthenticator_AuthenticateHTTP() {
	sum := sha256.Sum256([]byte("alice-secret"))
	a, err := auth.New(auth.Config{Keys: []auth.APIKey{{SHA256: hex.EncodeToString(sum[:]), Principal: "alice", Groups: []string{"admins"}}}})
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/mcp", nil)
	r.Header.Set("Authorization", "Bearer alice-secret")
	caller, err := a.AuthenticateHTTP(r)
	fmt.Println(caller.Principal, caller.Groups, err)

	r.Header.Set("Authorization", "Bearer wrong")
	_, err = a.AuthenticateHTTP(r)
	fmt.Println(status.Code(err))
	// Output:
	// alice [admins] <nil>
	// Unauthenticated
}

// Without authentication configured, callers declare their principal, so
// a server serves only loopback.
func ExampleCheckLoopback() {
	fmt.Println(auth.CheckLoopback("gateway", "127.0.0.1:7070"))
	fmt.Println(status.Code(auth.CheckLoopback("gateway", "0.0.0.0:7070")))
	// Output:
	// <nil>
	// InvalidArgument
}
