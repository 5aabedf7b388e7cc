package console

// LoginBurst is loginBurst, for the HTTP tests: the failed logins one address gets at once.
const LoginBurst = loginBurst
