// Package adminapi is the contract of llmflow's admin API: the JSON body
// of every /admin route, as the gateway encodes it, and one Client that
// calls the routes. The command line (llmflow admin, budgets, share), the
// admin handlers and the console use these types, so a shape is written
// once and cannot drift between the server and its clients.
//
// The types are byte-compatible with what the server sends: field order
// and JSON tags are the encoding, and golden tests (testdata/) decode
// recorded answers and encode them again to the same bytes. Changing a
// field is changing the API.
//
// A listing answers {"data":[…],"object":"list"} (List). A refusal answers
// OpenAI's error shape (ErrorBody), which Client returns as an *Error
// keeping the status, the code and the message.
//
// The package depends on the standard library and the root package only
// (a test checks it), so any program can import it.
package adminapi
