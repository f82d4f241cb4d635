// A real OpenID Connect provider for tests: the certified `oidc-provider` package on loopback
// with its development login and consent pages (any login name and password are accepted).
//
// Protocol with the test (tests/it/oidc.rs): prints `PORT <n>` once listening; then reads one JSON
// line from stdin, {"redirect_uri": "..."}, registers the client `tollgate-test` (secret
// `test-client-secret`, client_secret_basic, PKCE required) with that redirect URI, and
// serves. Exits when stdin closes. The user named `X` has the address `X@idp.example`, which
// the provider reports as verified unless X starts with `unverified`. E-mail claims are left
// out of the ID token (the package's default for the code flow), so the relying party must
// ask the UserInfo endpoint.
import http from "node:http";
import readline from "node:readline";
import Provider from "oidc-provider";

let handler = null;
const server = http.createServer((req, res) => {
  if (!handler) {
    res.statusCode = 503;
    res.end("not ready");
    return;
  }
  handler(req, res);
});

server.listen(0, "127.0.0.1", () => {
  console.log(`PORT ${server.address().port}`);
});

const lines = readline.createInterface({ input: process.stdin });
lines.once("line", (line) => {
  const { redirect_uri } = JSON.parse(line);
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: [{
      client_id: "tollgate-test",
      client_secret: "test-client-secret",
      redirect_uris: [redirect_uri],
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
    }],
    claims: { openid: ["sub"], email: ["email", "email_verified"] },
    async findAccount(ctx, id) {
      return {
        accountId: id,
        async claims() {
          return { sub: id, email: `${id}@idp.example`, email_verified: !id.startsWith("unverified") };
        },
      };
    },
    pkce: { required: () => true },
    cookies: { keys: ["tollgate-test-cookie-key"] },
  });
  handler = provider.callback();
  console.log("READY");
});
lines.on("close", () => process.exit(0));
