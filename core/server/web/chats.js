// k3 chat page: conversations kept in this browser's localStorage. Each write
// re-reads the stored list and replaces one conversation by id, so two tabs
// open on the page do not erase each other's chats.
"use strict";

const Chats = (() => {
  const KEY = "k3.chats", CURRENT = "k3.chat";

  // list returns the stored conversations, most recently updated first.
  function list() {
    let all = [];
    try { all = JSON.parse(localStorage.getItem(KEY) || "[]"); } catch (_) { /* unreadable: start over */ }
    if (!Array.isArray(all)) all = [];
    return all.filter((c) => c && typeof c.id === "string" && Array.isArray(c.messages))
      .sort((a, b) => (b.updated || 0) - (a.updated || 0));
  }

  // write stores all, dropping the oldest conversations (never keep) while
  // the browser's quota refuses it. It returns how many it dropped.
  function write(all, keep) {
    for (let dropped = 0; ; dropped++) {
      try {
        localStorage.setItem(KEY, JSON.stringify(all));
        return dropped;
      } catch (e) {
        let i = all.length - 1;
        while (i >= 0 && all[i].id === keep) i--;
        if (i < 0) throw e;
        all.splice(i, 1);
      }
    }
  }

  function save(chat) {
    chat.updated = Date.now();
    const all = list().filter((c) => c.id !== chat.id);
    all.unshift(chat);
    return write(all, chat.id);
  }

  function remove(id) {
    write(list().filter((c) => c.id !== id));
    if (currentID() === id) localStorage.removeItem(CURRENT);
  }

  function get(id) { return list().find((c) => c.id === id) || null; }
  function currentID() { return localStorage.getItem(CURRENT); }
  function setCurrent(id) { if (id) localStorage.setItem(CURRENT, id); else localStorage.removeItem(CURRENT); }

  function create(firstText) {
    const title = (firstText || "").replace(/\s+/g, " ").trim().slice(0, 60) || "New chat";
    return { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 8), title, updated: Date.now(), messages: [] };
  }

  return { list, save, remove, get, currentID, setCurrent, create };
})();
