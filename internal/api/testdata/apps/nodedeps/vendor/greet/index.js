module.exports = (who) => `hello from greet to ${who}`;
